"""The demo's Celery app; run a worker with ``celery -A orders_demo worker``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "orders_demo.settings")

app = Celery("orders_demo")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
