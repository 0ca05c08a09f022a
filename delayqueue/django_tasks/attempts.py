"""One attempt of a Django task's job on the Celery worker (``run.run_django_task``): record
that it started (status RUNNING, its worker, its times) and send ``task_started``; call the
task, with a ``TaskContext`` when it takes one; record the outcome (SUCCESSFUL with the
return value, or the error) and send ``task_finished`` once the task has finished, which a
failure that delayqueue will retry has not.

The start is recorded in the round trip of the job's ``begin`` (starts.py, the runner's
riders), and the outcome in the round trip of its ack or fail, before it: a job costs the
Celery side no round trip of its own. ``task_finished`` is sent once the outcome is
written (a batch's jobs' at the batch's end, with their acks); a receiver that raises then
is logged, the outcome stands. Run where no call rode with the begin (an older runner, a
test calling the task), the attempt records its start and its outcome itself, one round
trip each.

The attempt number is delayqueue's own (the job's ``att``, counted by ``claim`` and given
back by ``reap`` for a dispatch that never started); a job's result keeps a worker id per
attempt, so ``TaskContext.attempt`` (``len(worker_ids)``) is that number for a job whose
result has lived since its first attempt."""

from __future__ import annotations

import json
import logging
import traceback
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from delayqueue.conf import get_settings
from delayqueue.django_tasks import results, starts
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
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.shards import logical
from delayqueue.errors import DelayQueueError
from delayqueue.runner import riders
from delayqueue.wire import dispatch_headers

logger = logging.getLogger("delayqueue.django_tasks")

TASKS_KEPT = 256  # rebuilt tasks a process keeps (by path, priority, queue and backend)
_tasks: dict[tuple[str, int, str, str], Task[Any, Any]] = {}


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
    task = task_of(path, priority, logical(queue), backend)
    if dispatch is None:
        return _call(task, None, args, kwargs)
    job_id = dispatch[1]
    started = timezone.now()
    begun = _started(riders.begun(job_id), queue, job_id, request, started, path, args,
                     kwargs, backend, priority, result_ttl)  # fmt: skip
    attempt = begun.attempt
    history = results.History.of(begun.result)
    if begun.result.started == begun.result.last_attempt:
        history.started_at = started  # this attempt's is the first start
    history.last_attempted_at = started  # (what the begin wrote was provisional: starts.py)
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
        max_attempts = begun.max_attempts
        if max_attempts is None:
            max_attempts = get_settings().max_attempts

        def failed() -> None:
            if attempt >= max_attempts:  # delayqueue sends it to dead: it has finished
                history.finished_at = finished
                _failed(task, job_id, args, kwargs, backend, history)

        _record_outcome(queue, job_id, result_ttl, TaskResultStatus.FAILED, finished, history,
                        None, failed)  # fmt: skip
        raise
    history.finished_at = timezone.now()

    def succeeded() -> None:
        try:
            finished = results.finished_result(result, history.finished_at, value)
            task_finished.send(sender=DelayQueueBackend, task_result=finished)
        except Exception:
            logger.exception("job %s: a task_finished receiver raised", job_id)

    _record_outcome(
        queue, job_id, result_ttl, TaskResultStatus.SUCCESSFUL, history.finished_at, history,
        returned, succeeded,
    )  # fmt: skip
    return value


def task_of(path: str, priority: int, queue_name: str, backend: str) -> Task[Any, Any]:
    """The task at ``path`` as it was enqueued (``results.rebuilt_task``), worked out once
    per process for each (path, priority, queue, backend); at most TASKS_KEPT kept."""
    key = (path, priority, queue_name, backend)
    found = _tasks.get(key)
    if found is None:
        found = results.rebuilt_task(
            results.import_task(path), priority=priority, queue_name=queue_name, backend=backend
        )
        if len(_tasks) >= TASKS_KEPT:
            _tasks.clear()
        _tasks[key] = found
    return found


def _started(
    ridden: Any,
    queue: str,
    job_id: str,
    request: Any,
    started: Any,
    path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    priority: int,
    result_ttl: int,
) -> task_results.TaskStarted:
    """What the start recorded with the job's begin found (its error raised), else the start
    recorded now, in one round trip of its own, on the direct connections as the runner's
    begin; no replica WAIT (a result is best effort)."""
    if isinstance(ridden, DelayQueueError):
        raise ridden
    if isinstance(ridden, task_results.TaskStarted):
        return ridden
    call = starts.started_call(
        queue_keys(queue), job_id, now_ms=results.to_ms(started), request=request, path=path,
        args=args, kwargs=kwargs, backend=backend, priority=priority, result_ttl=result_ttl,
    )  # fmt: skip
    begun = run_direct(call, durable=False, strict=False)
    if begun is None:  # (no token given: it always writes)
        raise DelayQueueError(f"job {job_id} on {queue}: its start was not recorded")
    return begun


def _failed(
    task: Task[Any, Any],
    job_id: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    history: results.History,
) -> None:
    """``task_finished`` of the last failure, once the outcome is written: a receiver that
    raises is logged (the job is settled already)."""
    try:
        failed = results.make_result(
            task, job_id, args, kwargs, backend, TaskResultStatus.FAILED, history
        )
        task_finished.send(sender=DelayQueueBackend, task_result=failed)
    except Exception:
        logger.exception("job %s: a task_finished receiver raised", job_id)


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
    returned: str | None,
    then: Callable[[], None],
) -> None:
    """Record how the attempt ended, in the round trip of the job's ack or fail when the
    runner settles it (else now), then call ``then``. A Redis that cannot take it does not
    change the outcome: the job is acked or failed as the task returned or raised, and its
    result says RUNNING until it expires."""
    call = task_results.task_finished(
        queue_keys(queue), job_id, result_ttl, status=status.value,
        finished_ms=results.to_ms(finished), returned=returned, **history.written(),
    )  # fmt: skip
    unsent = f"job {job_id} on {queue}: its result ({status.value}) could not be recorded"

    def report(reply: Any) -> None:
        then()

    if riders.settle_with(job_id, call, report, unsent):
        return
    try:
        run_direct(call, durable=False, strict=False)
    except DelayQueueError as exc:
        logger.error("%s (%s)", unsent, exc)
    then()


def _error_of(exc: BaseException) -> tuple[str, str]:
    """(exception class path, traceback), as Django's TaskError holds them."""
    kind = type(exc)
    try:
        trace = "".join(traceback.format_exception(exc))
    except Exception:  # an exception whose __str__ raises
        trace = f"{kind.__qualname__} (its traceback could not be formatted)"
    return f"{kind.__module__}.{kind.__qualname__}", trace[-results.MAX_TRACEBACK_CHARS :]
