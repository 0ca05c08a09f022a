"""The chaos harness's task module in an app that lists it itself, with no autodiscover_tasks():
``DQ_CHAOS_DELAYQUEUE='{"CELERY_APP": "tests.setups.chaos_app:app"}' python -m tests.chaos``."""

from celery import Celery

app = Celery("chaos_app", include=["tests.support.chaos_tasks"])
