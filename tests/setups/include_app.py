"""An app that lists its task modules itself, with no autodiscover_tasks()."""

from celery import Celery

app = Celery("include_app", include=["tests.setups.burst_tasks"])
