"""A Django ``TaskResult`` from what Redis holds about a job (``engine/task_results.py``):
delayqueue's own state of the job, and the results hash its runs write.

Status, by the job's state in delayqueue and what its last run recorded:

- scheduled (never run, or waiting for a retry): READY;
- in flight: RUNNING when its current attempt has started, READY while it is dispatched
  and not started yet;
- dead: FAILED (``finished_at``: when it died);
- gone from delayqueue (acked, or purged from dead): what its last run recorded,
  SUCCESSFUL, else FAILED; nothing recorded (cancelled before it ran, or the result
  expired): ``TaskResultDoesNotExist``.

Data in Redis that is not what delayqueue writes never raises anything else: a field that
cannot be read is left out (and logged), errors and worker ids are cut as the attempts cut
them when they write; a job whose task cannot be found is ``TaskResultDoesNotExist``,
with the reason. A read imports no code named in Redis beyond an installed app's modules:
the task is looked up among the modules this process has imported, else in an installed
app's package (``known_task``)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import logging
import re
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.utils.module_loading import import_string

from delayqueue.django_tasks.compat import (
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from delayqueue.django_tasks.job_args import (
    BACKEND,
    DEFAULT_BACKEND,
    DEFAULT_PRIORITY,
    MAX_KEPT,
    PRIORITY,
    RUN_DJANGO_TASK,
    stored_priority,
)
from delayqueue.engine.shards import logical
from delayqueue.engine.task_results import ResultFields, StoredTaskResult
from delayqueue.errors import CorruptJob
from delayqueue.validators import shown
from delayqueue.wire import decode_args

logger = logging.getLogger("delayqueue.django_tasks")

MAX_TRACEBACK_CHARS = 20_000  # of an error's traceback, its end
MAX_NAME_CHARS = 1_000  # of an error's exception class path, a worker id, a task path
# What data no build wrote can raise while a result is made of it (a number past what a
# datetime holds, JSON nested too deep ...): the result does not exist, as far as a read goes.
RESULT_ERRORS = (ValueError, TypeError, ArithmeticError, LookupError, RecursionError, OSError)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_TIME_PART = re.compile(f"[{_CROCKFORD}]{{1,10}}")
_TO_BASE32 = str.maketrans(_CROCKFORD, "0123456789abcdefghijklmnopqrstuv")


@dataclass
class History:
    """What a job's runs recorded: its workers and errors, one per attempt, and times."""

    workers: list[str] = field(default_factory=list)
    errors: list[tuple[str, str]] = field(default_factory=list)
    started_at: datetime | None = None
    last_attempted_at: datetime | None = None
    finished_at: datetime | None = None

    @classmethod
    def of(cls, stored: ResultFields) -> History:
        workers = _json(stored.workers, "workers", [])
        errors = _json(stored.errors, "errors", [])
        return cls(
            workers=[
                w[:MAX_NAME_CHARS]
                for w in (workers[-MAX_KEPT:] if isinstance(workers, list) else [])
                if isinstance(w, str)
            ],
            errors=[
                (str(e[0])[:MAX_NAME_CHARS], str(e[1])[-MAX_TRACEBACK_CHARS:])
                for e in (errors[-MAX_KEPT:] if isinstance(errors, list) else [])
                if isinstance(e, list) and len(e) == 2
            ],
            started_at=_time(stored.started),
            last_attempted_at=_time(stored.last_attempt),
            finished_at=_time(stored.finished),
        )

    def written(self) -> dict[str, Any]:
        """``record_task_result``'s arguments for the workers, errors, start and last
        start."""
        return {
            "workers": json.dumps(self.workers),
            "errors": json.dumps([list(e) for e in self.errors]),
            "started_ms": None if self.started_at is None else to_ms(self.started_at),
            "last_attempt_ms": (
                None if self.last_attempted_at is None else to_ms(self.last_attempted_at)
            ),
        }


def to_ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def from_ms(ms: float) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def read_ms(ms: float) -> datetime | None:
    """``from_ms``, or None for what no datetime holds (inf, nan, past the year 9999)."""
    try:
        return from_ms(ms)
    except (ValueError, OverflowError, OSError):
        return None


def id_time(job_id: str) -> datetime | None:
    """When a job id was made (a ULID's first 10 characters are its epoch ms, in Crockford's
    base 32): the ``enqueued_at`` of a Django task's result; None for no such characters, or
    a time past what a datetime holds."""
    head = job_id[:10]
    if not _TIME_PART.fullmatch(head):
        return None
    try:
        return from_ms(int(head.translate(_TO_BASE32), 32))
    except (ValueError, OverflowError):  # past year 9999 (a ULID's time part goes to 10889)
        return None


def import_task(path: str) -> Task[Any, Any]:
    """The Django task at ``path`` (a module-level ``@task``), or ImportError / TypeError.
    Imports its module: for running a job, never for reading one (``known_task``)."""
    found = import_string(path)
    if not isinstance(found, Task):
        raise TypeError(f"{path} is a {type(found).__name__}, not a Django task (@task)")
    return found


def known_task(path: str) -> Task[Any, Any]:
    """The Django task at ``path`` among the modules this process has imported (any process
    that made the task, to enqueue it or read its result, has), else in a module of an
    installed app's package (the project's own code, as Django's autodiscovery imports it);
    LookupError when there is none. No other module is imported: a path read from Redis
    names no code to run."""
    module_name, _, attribute = (
        path.rpartition(".") if len(path) <= MAX_NAME_CHARS else ("", "", "")
    )
    if not (module_name and attribute.isidentifier()):
        raise LookupError("it is no module-level name")
    module = sys.modules.get(module_name)
    if module is None and _in_an_installed_app(module_name):
        try:
            module = importlib.import_module(module_name)
        except Exception as error:  # the project's module fails to import: its problem
            raise LookupError(f"its module cannot be imported ({type(error).__name__})") from None
    if module is None:
        raise LookupError("no module of this process or of an installed app has that path")
    found = getattr(module, attribute, None)
    if not isinstance(found, Task):
        raise LookupError(f"it is a {type(found).__name__}, not a Django task (@task)")
    return found


def _in_an_installed_app(module_name: str) -> bool:
    """``module_name`` is a dotted path of identifiers inside an installed app's package."""
    from django.apps import apps

    parts = module_name.split(".")
    if not all(part.isidentifier() for part in parts):
        return False
    return any(
        module_name == config.name or module_name.startswith(config.name + ".")
        for config in apps.get_app_configs()
    )


def rebuilt_task(
    task: Task[Any, Any], *, priority: int, queue_name: str, backend: str
) -> Task[Any, Any]:
    """``task`` as it was enqueued. Not ``task.using()``: that validates the task against
    this process's TASKS, which need not name the enqueuing backend (a Celery worker's
    settings); the enqueuing backend validated it."""
    copy = object.__new__(type(task))
    changes = {"priority": priority, "queue_name": queue_name, "backend": backend}
    for each in dataclasses.fields(task):
        object.__setattr__(copy, each.name, changes.get(each.name, getattr(task, each.name)))
    return copy


def make_result(
    task: Task[Any, Any],
    job_id: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    status: TaskResultStatus,
    history: History,
    return_value: Any = None,
) -> TaskResult[Any]:
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=job_id,
        status=status,
        enqueued_at=id_time(job_id),
        started_at=history.started_at,
        finished_at=history.finished_at,
        last_attempted_at=history.last_attempted_at,
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=[TaskError(exception_class_path=p, traceback=t) for p, t in history.errors],
        worker_ids=list(history.workers),
    )
    if status == TaskResultStatus.SUCCESSFUL:
        object.__setattr__(result, "_return_value", return_value)
    return result


def from_stored(stored: StoredTaskResult, job_id: str) -> TaskResult[Any]:
    """The result of job ``job_id`` as Redis holds it, or TaskResultDoesNotExist (and
    nothing else, whatever Redis holds)."""
    try:
        return _from_stored(stored, job_id)
    except RESULT_ERRORS as exc:
        logger.warning("job %s on %s: its result cannot be read: %r", job_id, stored.queue, exc)
        raise TaskResultDoesNotExist(f"{job_id}: its result cannot be read ({exc!r})") from None


def _from_stored(stored: StoredTaskResult, job_id: str) -> TaskResult[Any]:
    path, args, kwargs, backend, priority = _call_of(stored, job_id)
    try:
        task = known_task(path)
    except LookupError as exc:
        raise TaskResultDoesNotExist(
            f"{job_id}: its task {shown(path)} cannot be found ({exc})"
        ) from None
    task = rebuilt_task(task, priority=priority, queue_name=logical(stored.queue), backend=backend)
    history = History.of(stored.result)
    status = _status(stored)
    return_value = None
    if status == TaskResultStatus.SUCCESSFUL:
        return_value = _json(stored.result.returned, "return value", None)
    elif status == TaskResultStatus.FAILED:
        if stored.state == "dead" and stored.score:
            history.finished_at = read_ms(stored.score)
    else:
        history.finished_at = None
    return make_result(task, job_id, args, kwargs, backend, status, history, return_value)


def _status(stored: StoredTaskResult) -> TaskResultStatus:
    recorded = stored.result.status
    if stored.state == "dead":
        return TaskResultStatus.FAILED
    if stored.state == "scheduled":
        return TaskResultStatus.READY
    if stored.state == "inflight":
        if stored.status_is_current:
            if recorded in (TaskResultStatus.RUNNING.value, TaskResultStatus.SUCCESSFUL.value):
                return TaskResultStatus(recorded)
        return TaskResultStatus.READY
    if recorded == TaskResultStatus.SUCCESSFUL.value:
        return TaskResultStatus.SUCCESSFUL
    return TaskResultStatus.FAILED  # gone without a success: purged from dead, or deleted


def _call_of(
    stored: StoredTaskResult, job_id: str
) -> tuple[str, list[Any], dict[str, Any], str, int]:
    """(task path, args, kwargs, backend alias, priority) of the job: from its record while
    delayqueue holds one, else from its results hash."""
    job, result = stored.job, stored.result
    try:
        if job.args is not None:
            if job.task != RUN_DJANGO_TASK:
                raise CorruptJob(f"it is a job of {job.task!r}, not a Django task")
            outer, options = decode_args(job.args, job.kwargs or "")
            if len(outer) != 3:
                raise CorruptJob("its arguments are not [task path, args, kwargs]")
            path, args, kwargs = outer
            backend = options.get(BACKEND, DEFAULT_BACKEND)
            priority = stored_priority(options.get(PRIORITY, DEFAULT_PRIORITY))
        elif result.task is not None:
            path = result.task
            args, kwargs = decode_args(_or(result.args, "[]"), result.kwargs or "")
            backend = _or(result.backend, DEFAULT_BACKEND)
            priority = stored_priority(_or(result.priority, "0"))
        else:
            raise CorruptJob("neither its record nor its result names its task")
        if not (isinstance(path, str) and isinstance(args, list) and isinstance(kwargs, dict)):
            raise CorruptJob("its task path, args or kwargs are of the wrong type")
        if not isinstance(backend, str) or priority is None:
            raise CorruptJob("its backend or priority is of the wrong type")
    except (CorruptJob, ValueError) as exc:
        logger.warning("job %s on %s is not a Django task's result: %s", job_id, stored.queue, exc)
        raise TaskResultDoesNotExist(f"{job_id}: not a Django task's result ({exc})") from None
    return path, args, kwargs, backend, priority


def _or(value: str | None, absent: str) -> str:
    """A stored field, or ``absent`` when it is not there (an empty one stays empty)."""
    return absent if value is None else value


def _json(text: str | None, name: str, default: Any) -> Any:
    if text is None:
        return default
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        logger.warning("a Django task's result has a field %r that is not JSON", name)
        return default


def _time(text: str | None) -> datetime | None:
    """A time field; None when it is none, or past what a datetime holds (year 9999)."""
    text = text or ""
    if not (text.isascii() and text.isdigit() and len(text) <= 15):
        return None
    try:
        return from_ms(int(text))
    except (ValueError, OverflowError):
        return None
