from django.apps import AppConfig


class OrdersDemoConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "orders_demo"
    verbose_name = "Orders demo"
