"""Two apps in one project: the worker runs ``second``; the first knows nothing of the tasks."""

from celery import Celery

first = Celery("first")
second = Celery("second", include=["tests.setups.burst_tasks"])
app = second
