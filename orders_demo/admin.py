from django.contrib import admin

from .models import Order, Product


@admin.register(Product)
class ProductAdmin(admin.ModelAdmin):
    list_display = ["name", "price", "stock"]
    search_fields = ["name"]


@admin.register(Order)
class OrderAdmin(admin.ModelAdmin):
    list_display = ["id", "product", "quantity", "status", "created_at", "payment_due_at"]
    list_filter = ["status"]
    list_select_related = ["product"]
    readonly_fields = ["created_at", "paid_at", "closed_at", "close_job_id"]
