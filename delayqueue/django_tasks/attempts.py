"""One attempt of a Django task's job on the Celery worker (``run.run_django_task``): record
that it started (status RUNNING, its worker, its times) and send ``task_started``; call the
task, with a ``TaskContext`` when it takes one; record the outcome (SUCCESSFUL with the
return value, or the error) and send ``task_finished`` once the task has finished, which a
failure that delayqueue will retry has not.

The attempt number is delayqueue's own (the job's ``att``, counted by ``claim`` and given
back by ``reap`` for a dispatch that never started); a job's result keeps a worker id per
attempt, so ``TaskContext.attempt`` (``len(worker_ids)``) is that number for a job whose
result has lived since its first attempt."""

from __future__ import annotations

import json
import logging
import os
import socket
import traceback
from typing import Any

from django.utils import timezone

from delayqueue.conf import get_settings
from delayqueue.django_tasks import results
from delayqueue.django_tasks.backend import DelayQueueBackend
from delayqueue.django_tasks.compat import (
    Task,
    TaskContext,
    TaskResult,
    TaskResultStatus,
    normalize_json,
    task_finished,
    task_started,
)
from delayqueue.engine import task_results
from delayqueue.engine.execution import run_direct
from delayqueue.engine.keys import TaskResultField, queue_keys
from delayqueue.engine.shards import logical
from delayqueue.engine.task_results import record_task_result
from delayqueue.errors import DelayQueueError
from delayqueue.wire import dispatch_headers

logger = logging.getLogger("delayqueue.django_tasks")


def run_attempt(
    request: Any,
    path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    priority: int,
    result_ttl: int,
) -> Any:
    """Run one attempt of the job of the current Celery ``request`` (its dispatch headers
    name the queue and the job). Called outside a dispatch (``.delay()``, ``.apply()``), the
    task runs and nothing is recorded."""
    dispatch = dispatch_headers(request)
    queue = dispatch[0] if dispatch is not None else "default"
    priority = results.stored_priority(priority) or 0  # a job an earlier build wrote: True
    task = results.rebuilt_task(
        results.import_task(path), priority=priority, queue_name=logical(queue), backend=backend
    )
    if dispatch is None:
        return _call(task, None, args, kwargs)
    job_id = dispatch[1]
    started = timezone.now()
    # one round trip, on the direct connections as the runner's begin; no replica WAIT (a
    # result is best effort)
    call = task_results.task_started(
        queue_keys(queue),
        job_id,
        now_ms=results.to_ms(started),
        worker=_worker_id(request),
        ttl_seconds=result_ttl,
        kept=results.MAX_KEPT,
        fields={
            TaskResultField.TASK: path,
            TaskResultField.ARGS: json.dumps(args),
            TaskResultField.KWARGS: json.dumps(kwargs),
            TaskResultField.BACKEND: backend,
            TaskResultField.PRIORITY: str(priority),
            TaskResultField.STATUS: TaskResultStatus.RUNNING.value,
        },
    )
    begun = run_direct(call, durable=False, strict=False)
    attempt = begun.attempt
    history = results.History.of(begun.result)
    result = results.make_result(
        task, job_id, args, kwargs, backend, TaskResultStatus.RUNNING, history
    )
    task_started.send(sender=DelayQueueBackend, task_result=result)
    try:
        value = _call(task, result, args, kwargs)
        returned = json.dumps(value)
    except Exception as exc:
        finished = timezone.now()
        history.errors = [*history.errors, _error_of(exc)][-results.MAX_KEPT :]
        _record_outcome(queue, job_id, result_ttl, TaskResultStatus.FAILED, finished, history)
        max_attempts = begun.max_attempts
        if max_attempts is None:
            max_attempts = get_settings().max_attempts
        if attempt >= max_attempts:  # delayqueue sends it to dead: it has finished
            history.finished_at = finished
            failed = results.make_result(
                task, job_id, args, kwargs, backend, TaskResultStatus.FAILED, history
            )
            task_finished.send(sender=DelayQueueBackend, task_result=failed)
        raise
    history.finished_at = timezone.now()
    _record_outcome(
        queue, job_id, result_ttl, TaskResultStatus.SUCCESSFUL, history.finished_at, history,
        returned,
    )  # fmt: skip
    succeeded = results.make_result(
        task, job_id, args, kwargs, backend, TaskResultStatus.SUCCESSFUL, history, value
    )
    task_finished.send(sender=DelayQueueBackend, task_result=succeeded)
    return value


def _call(
    task: Task[Any, Any], result: TaskResult[Any] | None, args: list[Any], kwargs: Any
) -> Any:
    """The task's return value as JSON values (what Django's backends keep). An async task
    runs on an event loop of its own (``Task.call``: asgiref's ``async_to_sync``)."""
    if task.takes_context:
        if result is None:
            raise TypeError(f"{task.module_path} takes a context: run it through its backend")
        value = task.call(TaskContext(task_result=result), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    return normalize_json(value)


def _record_outcome(
    queue: str,
    job_id: str,
    result_ttl: int,
    status: TaskResultStatus,
    finished: Any,
    history: results.History,
    returned: str | None = None,
) -> None:
    """Record how the attempt ended. A Redis that cannot take it now does not change the
    outcome: the job is acked or failed as the task returned or raised, and its result says
    RUNNING until it expires."""
    fields = {
        TaskResultField.STATUS: status.value,
        TaskResultField.FINISHED: str(results.to_ms(finished)),
        **history.fields(),
    }
    if returned is not None:
        fields[TaskResultField.RETURN] = returned
    try:
        record_task_result(queue, job_id, fields, result_ttl)
    except DelayQueueError as exc:
        logger.error("job %s on %s: its result (%s) could not be recorded: %s", job_id, queue,
                     status.value, exc)  # fmt: skip


def _error_of(exc: BaseException) -> tuple[str, str]:
    """(exception class path, traceback), as Django's TaskError holds them."""
    kind = type(exc)
    try:
        trace = "".join(traceback.format_exception(exc))
    except Exception:  # an exception whose __str__ raises
        trace = f"{kind.__qualname__} (its traceback could not be formatted)"
    return f"{kind.__module__}.{kind.__qualname__}", trace[-results.MAX_TRACEBACK_CHARS :]


def _worker_id(request: Any) -> str:
    """The Celery worker's node name (``celery@host``), else this host and process."""
    hostname = getattr(request, "hostname", None)
    return str(hostname) if hostname else f"{socket.gethostname()}:{os.getpid()}"
