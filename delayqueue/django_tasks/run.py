"""``delayqueue.run_django_task``: the Celery task that every job of a Django task runs.

A ``@delayed_task`` of delayqueue's own, so a Django task's job gets what every delayqueue job
gets: the fencing-token check, the visibility timeout restarted at its start, an ack only
once it finished, retries with backoff, dead letters. Its arguments are the Django task's
module path, its args and kwargs (JSON), and the keywords of ``job_args.py``.

This module imports neither Django's Tasks framework nor the backend: it must be importable
in every Celery worker and delay worker of a project that installs delayqueue, whether or not
the framework is installed there. ``attempts.py`` does the work, imported at the first run;
``starts.py`` makes the call that records its start, sent with its job's begin."""

from __future__ import annotations

import threading
from typing import Any

from celery import Task

from delayqueue.django_tasks.job_args import (
    DEFAULT_BACKEND,
    DEFAULT_PRIORITY,
    DEFAULT_RESULT_TTL,
    PRIORITY,
    RUN_DJANGO_TASK,
)
from delayqueue.django_tasks.starts import START_WITH_BEGIN
from delayqueue.producer.decorator import delayed_task
from delayqueue.runner.attempt import backoff_ms


class _Running(threading.local):
    """The backoff base of the job this thread (or greenlet) runs, read by ``retry_backoff``
    when the attempt fails: the backoff is the backend's OPTIONS, carried by each job, and
    delayqueue asks the task for it only after the run raised."""

    backoff: float | None = None


_running = _Running()


def retry_backoff(attempt: int) -> float:
    """Seconds before attempt ``attempt + 1``: delayqueue's exponential backoff (capped,
    with jitter) from the failed job's BACKOFF, else from delayqueue's BACKOFF_BASE."""
    return backoff_ms(attempt, _running.backoff) / 1000


@delayed_task(
    name=RUN_DJANGO_TASK,
    bind=True,
    backoff=retry_backoff,
    ignore_result=True,
    dq_priority_kwarg=PRIORITY,  # the Django task's priority: higher first in a pass
    dq_rides=START_WITH_BEGIN,  # its start in its begin's round trip (starts.py)
)
def run_django_task(
    self: Task[Any, Any],
    path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str = DEFAULT_BACKEND,
    priority: int = DEFAULT_PRIORITY,
    result_ttl: int = DEFAULT_RESULT_TTL,
    backoff: float | None = None,
) -> Any:
    """Run the Django task at ``path`` with ``args`` and ``kwargs``, recording its result
    (delayqueue/django_tasks/attempts.py). A failure is raised again, for delayqueue to
    retry the job or send it to dead."""
    try:
        run_attempt = _attempts[0] if _attempts else _import_run_attempt()
        return run_attempt(self.request, path, args, kwargs, backend, priority, result_ttl)
    except BaseException:
        # (read by retry_backoff, after the run raised: only then)
        _running.backoff = backoff if isinstance(backoff, (int, float)) else None
        raise


_attempts: list[Any] = []  # attempts.run_attempt, once imported (at the first run)


def _import_run_attempt() -> Any:
    from delayqueue.django_tasks.attempts import run_attempt

    _attempts.append(run_attempt)
    return run_attempt
