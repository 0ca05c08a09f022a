"""ASGI entry point for the demo project: ``uvicorn orders_demo.asgi:application``. The
async views (``/async/orders/...``) schedule and cancel through delayqueue's async API."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orders_demo.settings")

application = get_asgi_application()
