from django.contrib import admin
from django.urls import path

from . import views

urlpatterns = [
    path("", views.product_list, name="product_list"),
    path("orders/", views.order_list, name="order_list"),
    path("orders/new/", views.place_order, name="place_order"),
    path("orders/<int:order_id>/pay/", views.pay_order, name="pay_order"),
    # the same through the async API (serve the demo with orders_demo/asgi.py)
    path("async/orders/new/", views.place_order_async, name="place_order_async"),
    path("async/orders/<int:order_id>/pay/", views.pay_order_async, name="pay_order_async"),
    path("admin/", admin.site.urls),
]
