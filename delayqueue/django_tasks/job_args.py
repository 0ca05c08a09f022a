"""What a Django task's delayqueue job carries, shared by the backend that writes it and the
run that reads it: the Celery task it runs, and the keyword arguments of that run beside the
Django task's module path, args and kwargs (left out of a job when they are the default)."""

from __future__ import annotations

RUN_DJANGO_TASK = "delayqueue.run_django_task"

BACKEND = "backend"  # the TASKS alias it was enqueued through (default "default")
PRIORITY = "priority"  # the Django task's priority (default 0)
RESULT_TTL = "result_ttl"  # seconds its result is kept after its last write
BACKOFF = "backoff"  # base seconds of the retry backoff (default: delayqueue's BACKOFF_BASE)

DEFAULT_BACKEND = "default"
DEFAULT_PRIORITY = 0
DEFAULT_RESULT_TTL = 24 * 3600
