"""Celery tasks of delayqueue itself (found by Celery's autodiscover_tasks)."""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task

from delayqueue.runner import dispatch_headers, get_celery_app, run_job

RUN_TASK = "delayqueue.run_task"


@shared_task(name=RUN_TASK, bind=True)
def run_task(self: Task[Any, Any], name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run a job of a plain Celery task (one not made by @delayed_task) with delayqueue's
    bookkeeping: the fencing-token check, then ack or retry/dead."""
    target = get_celery_app().tasks[name]
    dispatch = dispatch_headers(self.request)
    if dispatch is None:
        return target(*args, **kwargs)
    return run_job(target, args, kwargs, dispatch)
