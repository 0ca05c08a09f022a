"""A Celery app of a service that shares the broker but not delayqueue: no Django, no
delayqueue import. It runs plain tasks by name."""

from celery import Celery

app = Celery("bare_app", include=["tests.setups.bare_tasks"])
