"""Django's Tasks framework on delayqueue::

    TASKS = {
        "default": {
            "BACKEND": "delayqueue.tasks_backend.DelayQueueBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"RESULT_TTL": 86400, "MAX_ATTEMPTS": 5},
        }
    }

On Django 6.0 and later (``django.tasks``), and on Django 5.2 with the django-tasks backport
(``pip install 'delayqueue[tasks]'``). The backend lives in ``delayqueue/django_tasks/``;
docs/tasks-backend.md says what it does and how it differs from the others."""

# The Celery task its jobs run, registered in every process that uses the backend (Celery
# workers and delay workers get it from the Django app's ready()).
import delayqueue.django_tasks.run  # noqa: F401
from delayqueue.django_tasks.backend import BackendOptions, DelayQueueBackend

__all__ = ["BackendOptions", "DelayQueueBackend"]
