"""``DelayQueueTask``: the backend's ``task_class``, a Django ``Task`` with delayqueue's
per-task retry options. Where ``@task`` passes extra arguments on to the backend's
``task_class`` (Django 6.1, the django-tasks backport) they are written on the task::

    @task(queue_name="emails", max_attempts=8, backoff=30, visibility_timeout=120)
    def send_reminder(order_id: int) -> None: ...

Each one left at None takes the backend's ``OPTIONS`` (then delayqueue's settings). Django
6.0's ``@task`` takes no extra arguments: there, ``OPTIONS`` set them for every task."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, cast

from delayqueue.django_tasks.compat import InvalidTask, Task
from delayqueue.errors import InvalidOption
from delayqueue.producer.task_options import checked_limits
from delayqueue.validators import check_backoff, check_max_attempts, check_visibility_timeout


@dataclass(frozen=True, slots=True, kw_only=True)
class DelayQueueTask(Task):
    max_attempts: int | None = None  # attempts before the job is dead
    backoff: float | None = None  # base seconds of the exponential retry backoff
    visibility_timeout: float | None = None  # seconds an attempt may run before it runs again
    rate: str | None = None  # "N/s", "N/m", "N/h": starts in any window (docs/limits.md)
    concurrency: int | None = None  # runs at once, across the deployment
    expires: float | timedelta | None = None  # seconds after run_after it may still start


# A task's own (max_attempts, backoff seconds, visibility_timeout seconds); None: not set.
TaskOptions = tuple[int | None, float | None, float | None]


def backoff_seconds(value: Any, name: str) -> float | None:
    """A Django task's backoff base: None or seconds, as it travels with each job (a
    callable cannot); InvalidOption otherwise."""
    if callable(value):
        raise InvalidOption(f"{name} must be seconds (it travels with each job)")
    return cast(float | None, check_backoff(value, name))


def task_options(task: Task[Any, Any]) -> TaskOptions:
    """A task's own (max_attempts, backoff, visibility_timeout), checked (``InvalidTask``
    naming the task); (None, None, None) for a task of another ``task_class``."""
    max_attempts = getattr(task, "max_attempts", None)
    backoff = getattr(task, "backoff", None)
    visibility_timeout = getattr(task, "visibility_timeout", None)
    try:
        if max_attempts is not None:
            max_attempts = check_max_attempts(max_attempts)
        if backoff is not None:
            backoff = backoff_seconds(backoff, "backoff")
        if visibility_timeout is not None:
            visibility_timeout = check_visibility_timeout(visibility_timeout)
    except InvalidOption as exc:
        raise InvalidTask(f"task {task.module_path}: {exc}") from None
    return max_attempts, backoff, visibility_timeout


# A task's own (rate, concurrency, expires); None: not set (docs/limits.md).
TaskLimits = tuple[str | None, int | None, float | timedelta | None]


def task_limits(task: Task[Any, Any]) -> TaskLimits:
    """A task's own rate, concurrency and expires, checked (``InvalidTask`` naming the
    task); all None for a task of another ``task_class``."""
    own = (
        getattr(task, "rate", None),
        getattr(task, "concurrency", None),
        getattr(task, "expires", None),
    )
    try:
        checked_limits(*own)
    except InvalidOption as exc:
        raise InvalidTask(f"task {task.module_path}: {exc}") from None
    return own
