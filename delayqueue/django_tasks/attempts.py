"""One attempt of a Django task's job on the Celery worker (``run.run_django_task``): record
that it started (status RUNNING, its worker, its times) and send ``task_started``; call the
task, with a ``TaskContext`` when it takes one; record the outcome (SUCCESSFUL with the
return value, or the error) and send ``task_finished`` once the task has finished, which a
failure that delayqueue will retry has not.

The start is recorded by the job's ``begin`` (starts.py, the runner's riders), and the
outcome by its ack or fail, each in that transition's own script call: a job costs the
Celery side no round trip of its own. ``task_finished`` is sent once the outcome is
written (a batch's jobs' at the batch's end, with their acks), to the receivers heard both
when the task returned and then (a success that no one hears keeps nothing of the attempt
until then); a receiver that raises then is logged, the outcome stands. Run where no call
rode with the begin (an older runner, a test calling the task), the attempt records its
start and its outcome itself, one round trip each.

The attempt's ``TaskResult`` is made once, when something needs it: the task's
``TaskContext``, or a signal someone hears (``compat.heard``: not when its only receiver is
Django's own log line and its logger drops that line), and carried from RUNNING to its
outcome in place, as Django's own backends carry theirs. The outcome written leaves the
workers as the start wrote them, and the errors as they were when the attempt succeeded.

The attempt number is delayqueue's own (the job's ``att``, counted by ``claim`` and given
back by ``reap`` for a dispatch that never started); a job's result keeps a worker id per
attempt, so ``TaskContext.attempt`` (``len(worker_ids)``) is that number for a job whose
result has lived since its first attempt."""

from __future__ import annotations

import inspect
import json
import logging
import time
import traceback
from collections.abc import Callable
from typing import Any

from delayqueue.conf import get_settings
from delayqueue.django_tasks import results, starts
from delayqueue.django_tasks.backend import DelayQueueBackend
from delayqueue.django_tasks.compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultStatus,
    heard,
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
# each with its function when ``Task.call`` would only call it (see ``task_of``)
_tasks: dict[tuple[str, int, str, str], tuple[Task[Any, Any], Callable[..., Any] | None]] = {}
_SCALARS = frozenset((str, int, float, bool, type(None)))  # JSON values as they are
_DJANGO_CALL = Task.call  # Django's own: a task class that replaces it is called through it
_SUCCESSFUL, _FAILED = TaskResultStatus.SUCCESSFUL.value, TaskResultStatus.FAILED.value
_encode = json.JSONEncoder().encode  # json.dumps's, without its call
_clock = time.time
TaskStarted = task_results.TaskStarted


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
    if type(priority) is not int:  # a job an earlier build wrote: True
        priority = results.stored_priority(priority) or 0
    found = _tasks.get((path, priority, queue, backend))
    task, direct = found if found is not None else task_of(path, priority, queue, backend)
    if dispatch is None:
        return _call(task, direct, None, args, kwargs)
    job_id = dispatch[1]
    start_ms = round(_clock() * 1000)
    begun = riders.begun(job_id)
    if type(begun) is not TaskStarted:  # (none rode with its begin, or it met an error)
        begun = _started(begun, queue, job_id, request, start_ms, path, args, kwargs,
                         backend, priority, result_ttl)  # fmt: skip
    run = None  # (made when something needs its TaskResult, or the task raised)
    if task.takes_context or heard(task_started, logging.INFO):
        run = _Run(task, job_id, args, kwargs, backend, begun, start_ms)
        task_started.send(sender=DelayQueueBackend, task_result=run.result())
    try:
        if direct is None:
            value = _call(task, direct, None if run is None else run.made, args, kwargs)
        else:  # (``_call``'s, without its call)
            value = direct(*args, **kwargs)
            if type(value) not in _SCALARS:
                value = normalize_json(value)
        returned = "null" if value is None else _encode(value)
    except Exception as exc:
        if run is None:
            run = _Run(task, job_id, args, kwargs, backend, begun, start_ms)
        run.failed(queue, result_ttl, exc)
        raise
    finished_ms = round(_clock() * 1000)
    if heard(task_finished, logging.INFO):
        if run is None:
            run = _Run(task, job_id, args, kwargs, backend, begun, start_ms)
        run.succeeded(queue, result_ttl, value, returned, finished_ms)
    else:
        # Nothing to send once the outcome is written: nothing kept until then (a batch's
        # outcomes are written at its end).
        _record(queue, job_id, result_ttl, start_ms, begun.first, _SUCCESSFUL, finished_ms,
                _nothing, returned=returned)  # fmt: skip
    return value


class _Run:
    """One attempt as it goes: what its start found (``begun``), its own start, and its
    ``TaskResult``, made only when something needs it (the task's context, a signal that
    someone hears: ``compat.heard``), then once, and carried from RUNNING to its outcome as
    Django's own backends carry theirs (one object, its fields set in place)."""

    __slots__ = ("task", "job_id", "args", "kwargs", "backend", "begun", "start_ms", "first",
                 "made")  # fmt: skip

    def __init__(
        self,
        task: Task[Any, Any],
        job_id: str,
        args: list[Any],
        kwargs: dict[str, Any],
        backend: str,
        begun: task_results.TaskStarted,
        start_ms: int,
    ) -> None:
        self.task, self.job_id, self.args, self.kwargs = task, job_id, args, kwargs
        self.backend, self.begun, self.start_ms = backend, begun, start_ms
        # this attempt's start is the job's first (what the begin wrote was provisional)
        self.first = begun.first
        self.made: TaskResult[Any] | None = None

    def result(self) -> TaskResult[Any]:
        """The attempt's result, RUNNING when first made."""
        if self.made is None:
            history = results.History.of(self.begun.result)
            start = results.from_ms(self.start_ms)
            if self.first:
                history.started_at = start
            history.last_attempted_at = start
            self.made = results.make_result(
                self.task, self.job_id, self.args, self.kwargs, self.backend,
                TaskResultStatus.RUNNING, history,
            )  # fmt: skip
        return self.made

    def succeeded(
        self, queue: str, result_ttl: int, value: Any, returned: str, finished_ms: int
    ) -> None:
        """The success recorded, then ``task_finished`` sent when someone hears it."""

        def then(reply: Any = None) -> None:
            if heard(task_finished, logging.INFO):
                self._send_finished(TaskResultStatus.SUCCESSFUL, finished_ms, value=value)

        _record(queue, self.job_id, result_ttl, self.start_ms, self.first, _SUCCESSFUL,
                finished_ms, then, returned=returned)  # fmt: skip

    def failed(self, queue: str, result_ttl: int, exc: Exception) -> None:
        finished_ms = _now_ms()
        error = _error_of(exc)
        read = self.begun.read  # (None: a first start, no errors before)
        errors = [*(results.History.of(read).errors if read else ()), error][-results.MAX_KEPT :]
        max_attempts = self.begun.max_attempts
        if max_attempts is None:
            max_attempts = get_settings().max_attempts
        last = self.begun.attempt >= max_attempts  # delayqueue sends it to dead: finished

        def then(reply: Any = None) -> None:
            if last:
                self._send_finished(TaskResultStatus.FAILED, finished_ms, error=error)

        written = json.dumps([list(e) for e in errors])
        _record(queue, self.job_id, result_ttl, self.start_ms, self.first, _FAILED,
                finished_ms, then, errors=written)  # fmt: skip

    def _send_finished(
        self,
        status: TaskResultStatus,
        finished_ms: int,
        *,
        value: Any = None,
        error: tuple[str, str] | None = None,
    ) -> None:
        """``task_finished``, once the outcome is written: a receiver that raises is logged
        (the job is settled already)."""
        try:
            result = self.result()
            if error is not None:
                failure = TaskError(exception_class_path=error[0], traceback=error[1])
                errors = [*result.errors, failure][-results.MAX_KEPT :]
                object.__setattr__(result, "errors", errors)
            object.__setattr__(result, "status", status)
            object.__setattr__(result, "finished_at", results.from_ms(finished_ms))
            if status == TaskResultStatus.SUCCESSFUL:
                object.__setattr__(result, "_return_value", value)
            task_finished.send(sender=DelayQueueBackend, task_result=result)
        except Exception:
            logger.exception("job %s: a task_finished receiver raised", self.job_id)


def _record(
    queue: str,
    job_id: str,
    result_ttl: int,
    start_ms: int,
    first: bool,
    status: str,
    finished_ms: int,
    then: Callable[[Any], None],
    *,
    returned: str | None = None,
    errors: str | None = None,
) -> None:
    """Record how the attempt of job ``job_id`` that started at ``start_ms`` (``first``: the
    job's first start) ended, in the round trip of the job's ack or fail when the runner
    settles it (else now), then call ``then`` (with the reply, or None). A Redis that cannot
    take it does not change the outcome: the job is acked or failed as the task returned or
    raised, and its result says RUNNING until it expires. Written: the status (``status``:
    a TaskResultStatus's value), when it ended, this attempt's start (and the first start
    when it is this one: else it stands as stored), the return value or the errors. The
    workers stand as the start wrote them, and a success leaves the errors as they are."""
    call = task_results.task_finished(
        queue_keys(queue), job_id, result_ttl, status=status, finished_ms=finished_ms,
        started_ms=start_ms if first else None, last_attempt_ms=start_ms, returned=returned,
        errors=errors,
    )  # fmt: skip
    unsent = f"job {job_id} on {queue}: its result ({status}) could not be recorded"
    if riders.settle_with(job_id, call, then, unsent):  # then(reply) after it is sent
        return
    try:
        run_direct(call, durable=False, strict=False)
    except DelayQueueError as exc:
        logger.error("%s (%s)", unsent, exc)
    then(None)


def _nothing(reply: Any = None) -> None:
    pass


def _now_ms() -> int:
    return round(time.time() * 1000)


def task_of(
    path: str, priority: int, queue: str, backend: str
) -> tuple[Task[Any, Any], Callable[..., Any] | None]:
    """The task at ``path`` as it was enqueued (``results.rebuilt_task``), and its function
    when ``Task.call`` would only call it (a function, not a coroutine function, that takes
    no context, on a task class that keeps Django's ``call``), so a run calls it straight.
    Worked out once per process for each (path, priority, queue, backend); at most
    TASKS_KEPT kept. ``queue``: the job's queue (a shard of a sharded queue: its task's
    queue_name is the logical queue's)."""
    key = (path, priority, queue, backend)
    found = _tasks.get(key)
    if found is None:
        task = results.rebuilt_task(
            results.import_task(path),
            priority=priority,
            queue_name=logical(queue),
            backend=backend,
        )
        plain = (
            not task.takes_context
            and type(task).call is _DJANGO_CALL
            and not inspect.iscoroutinefunction(task.func)
        )
        found = (task, task.func if plain else None)
        if len(_tasks) >= TASKS_KEPT:
            _tasks.clear()
        _tasks[key] = found
    return found


def _started(
    ridden: Any,
    queue: str,
    job_id: str,
    request: Any,
    start_ms: int,
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
        queue_keys(queue), job_id, now_ms=start_ms, request=request, path=path,
        args=args, kwargs=kwargs, backend=backend, priority=priority, result_ttl=result_ttl,
    )  # fmt: skip
    begun = run_direct(call, durable=False, strict=False)
    if begun is None:  # (no token given: it always writes)
        raise DelayQueueError(f"job {job_id} on {queue}: its start was not recorded")
    return begun


def _call(
    task: Task[Any, Any],
    direct: Callable[..., Any] | None,
    result: TaskResult[Any] | None,
    args: list[Any],
    kwargs: Any,
) -> Any:
    """The task's return value as JSON values (what Django's backends keep). An async task
    runs on an event loop of its own (``Task.call``: asgiref's ``async_to_sync``); a plain
    function (``direct``) is called as ``Task.call`` would call it."""
    if direct is not None:
        value = direct(*args, **kwargs)
    elif task.takes_context:
        if result is None:
            raise TypeError(f"{task.module_path} takes a context: run it through its backend")
        value = task.call(TaskContext(task_result=result), *args, **kwargs)
    else:
        value = task.call(*args, **kwargs)
    return value if type(value) in _SCALARS else normalize_json(value)


def _error_of(exc: BaseException) -> tuple[str, str]:
    """(exception class path, traceback), as Django's TaskError holds them."""
    kind = type(exc)
    try:
        trace = "".join(traceback.format_exception(exc))
    except Exception:  # an exception whose __str__ raises
        trace = f"{kind.__qualname__} (its traceback could not be formatted)"
    return f"{kind.__module__}.{kind.__qualname__}", trace[-results.MAX_TRACEBACK_CHARS :]
