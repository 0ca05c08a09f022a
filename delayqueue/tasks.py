"""Celery tasks of delayqueue itself (found by Celery's autodiscover_tasks)."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.signals import worker_process_init
from django.db import close_old_connections

from delayqueue import batches
from delayqueue.engine.execution import warm_up
from delayqueue.runner import (
    HEADER_CLAIMED,
    HEADER_ID,
    HEADER_QUEUE,
    HEADER_TOKEN,
    dispatch_headers,
    get_celery_app,
    header_ms,
    run_job,
)

RUN_TASK = "delayqueue.run_task"
RUN_BATCH = batches.RUN_BATCH

logger = logging.getLogger(__name__)


@worker_process_init.connect
def _warm_up_pool_process(**kwargs: Any) -> None:
    """A new Celery pool process registers delayqueue's scripts and connects to its Redis
    before its first job, not during it (about 10 ms the first job would wait)."""
    try:
        warm_up()
    except Exception as exc:  # Redis down now: the first job connects, or says why
        logger.warning("delayqueue could not reach Redis yet: %s", exc)


@shared_task(name=RUN_TASK, bind=True)
def run_task(self: Task[Any, Any], name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run a job of a plain Celery task (one not made by @delayed_task) with delayqueue's
    bookkeeping: the fencing-token check, then ack or retry/dead."""
    target = get_celery_app().tasks[name]
    dispatch = dispatch_headers(self.request)
    if dispatch is None:
        return target(*args, **kwargs)
    return run_job(target, args, kwargs, dispatch)


@shared_task(name=RUN_BATCH, bind=True, ignore_result=True)
def run_batch(self: Task[Any, Any], queue: str, task: str, entries: list[Any]) -> int:
    """Run the jobs of a batched hand-off (delayqueue/batches.py) one after another, each
    with the task's own request context; how many succeeded."""
    target = get_celery_app().tasks.get(task)
    if target is None or not isinstance(entries, list) or not isinstance(queue, str):
        logger.error("batch of %r on %r not run: no such task here, or not a batch", task, queue)
        return 0
    request = self.request

    def call(job: batches.BatchJob) -> Any:
        # The job's own request, as a single dispatch would have it (its headers as
        # attributes: self.request.dq_id in a bound task).
        headers = {HEADER_QUEUE: queue, HEADER_ID: job.id, HEADER_TOKEN: job.token}
        target.push_request(
            id=job.id,
            args=job.args,
            kwargs=job.kwargs,
            delivery_info=request.delivery_info,
            hostname=request.hostname,
            called_directly=False,
            headers=headers,
            **headers,
        )
        try:
            return target.run(*job.args, **job.kwargs)
        finally:
            target.pop_request()
            close_old_connections()  # as Celery's Django fixup does after each task

    return batches.run_batch(
        call,
        queue,
        task,
        entries,
        claimed_ms=header_ms(request, HEADER_CLAIMED),
        backoff=getattr(target, "dq_backoff", None),
        visibility_timeout=getattr(target, "dq_visibility_timeout", None),
    )
