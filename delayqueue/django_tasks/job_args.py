"""What a Django task's delayqueue job carries, shared by the backend that writes it and the
run that reads it: the Celery task it runs, and the keyword arguments of that run beside the
Django task's module path, args and kwargs (left out of a job when they are the default)."""

from __future__ import annotations

from typing import Any

RUN_DJANGO_TASK = "delayqueue.run_django_task"

BACKEND = "backend"  # the TASKS alias it was enqueued through (default "default")
PRIORITY = "priority"  # the Django task's priority (default 0)
RESULT_TTL = "result_ttl"  # seconds its result is kept after its last write
BACKOFF = "backoff"  # base seconds of the retry backoff (default: delayqueue's BACKOFF_BASE)

DEFAULT_BACKEND = "default"
DEFAULT_PRIORITY = 0
DEFAULT_RESULT_TTL = 24 * 3600

MAX_KEPT = 20  # worker ids and errors a result keeps: the last attempts'


def stored_priority(value: Any) -> int | None:
    """A priority as a job or its result holds it: an int (a JSON number, or its digits),
    or a bool, as a build that let ``priority=True`` through wrote it (``true``,
    ``"True"``), read as 1 / 0; None for anything else."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if value in ("True", "False"):
            return int(value == "True")
        if value.lstrip("-").isdigit() and len(value) <= 20 and value.isascii():
            return int(value)
    return None
