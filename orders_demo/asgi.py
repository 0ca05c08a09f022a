"""ASGI entry point for the demo project: ``uvicorn orders_demo.asgi:application`` (or
``manage.py run_demo --asgi``). The async views (``/async/orders/...``) schedule and cancel
through delayqueue's async API."""

import os

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orders_demo.settings")

application = get_asgi_application()
if settings.DEBUG:  # the admin's CSS and scripts, as runserver serves them in development
    application = ASGIStaticFilesHandler(application)
