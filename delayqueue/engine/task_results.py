"""The results of Django Tasks jobs (``delayqueue/django_tasks/``): a job's results hash
(``QueueKeys.task_result``, read into ``StoredTaskResult``) read in one round trip with what
delayqueue itself holds about the job (its state, its score there, its record's task,
arguments and attempts), and the results hash written with its TTL.

The results hash carries the queue's hash tag, so on Redis Cluster it lives in the slot of
the job's own keys. Everything is read as bytes (text with any byte that is not UTF-8
escaped): nothing stored is trusted, and nothing is unpickled. A key of the wrong type
(something else wrote it) reads as empty."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

from redis.client import NEVER_DECODE
from redis.exceptions import ResponseError

from delayqueue.engine.async_clients import loop_clients
from delayqueue.engine.clients import get_raw_redis
from delayqueue.engine.keys import (
    STATES,
    JobField,
    QueueKeys,
    State,
    TaskResultField,
    global_keys,
    queue_keys,
)
from delayqueue.engine.packing import job_fields
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.roster import split_queue_names
from delayqueue.engine.transitions import ScriptCall

# What a result needs of the job's own record (its hash, or its packed spec).
RECORD_FIELDS = (
    JobField.TASK,
    JobField.ARGS,
    JobField.KWARGS,
    JobField.ATTEMPTS,
    JobField.MAX_ATTEMPTS,
)


@dataclass(frozen=True)
class ResultFields:
    """A job's results hash, read once: each field as stored (text, any byte that is not
    UTF-8 escaped; None where absent). Times are epoch ms; workers, errors and the return
    value are JSON: what they hold is for the Django side to judge."""

    task: str | None = None  # the Django task's module path
    args: str | None = None  # JSON list
    kwargs: str | None = None  # JSON object
    backend: str | None = None  # the TASKS alias it was enqueued through
    priority: str | None = None
    status: str | None = None  # RUNNING, SUCCESSFUL or FAILED: what attempt ``attempt`` did
    attempt: str | None = None  # the job's attempt that wrote ``status``
    started: str | None = None  # its first attempt's start
    last_attempt: str | None = None  # its last attempt's start
    finished: str | None = None  # when the attempt of ``status`` ended
    workers: str | None = None  # JSON list: the Celery worker of each attempt
    errors: str | None = None  # JSON list of [exception class path, traceback]
    returned: str | None = None  # JSON of the return value


def result_fields(stored: Mapping[str, str]) -> ResultFields:
    get = stored.get
    return ResultFields(
        task=get(TaskResultField.TASK),
        args=get(TaskResultField.ARGS),
        kwargs=get(TaskResultField.KWARGS),
        backend=get(TaskResultField.BACKEND),
        priority=get(TaskResultField.PRIORITY),
        status=get(TaskResultField.STATUS),
        attempt=get(TaskResultField.ATTEMPT),
        started=get(TaskResultField.STARTED),
        last_attempt=get(TaskResultField.LAST_ATTEMPT),
        finished=get(TaskResultField.FINISHED),
        workers=get(TaskResultField.WORKERS),
        errors=get(TaskResultField.ERRORS),
        returned=get(TaskResultField.RETURN),
    )


@dataclass(frozen=True)
class ResultJob:
    """What a result needs of the job's own record (its hash, or its packed spec), as
    stored (None where absent)."""

    task: str | None = None
    args: str | None = None
    kwargs: str | None = None


@dataclass(frozen=True)
class StoredTaskResult:
    """What Redis holds about one job of a Django task: its results hash and its record,
    its state (None: in no state, or gone) and its score there (the due time, the
    visibility deadline, when it died)."""

    queue: str
    result: ResultFields
    job: ResultJob
    state: State | None
    score: float | None
    # the job's attempt (counted by claim) is the one that wrote the result's status
    status_is_current: bool = False


def _commands(keys: QueueKeys, job_id: str) -> list[tuple[Any, ...]]:
    return [
        ("HGETALL", keys.task_result(job_id)),
        *(("ZSCORE", keys.of_state(state), job_id) for state in STATES),
        ("HMGET", keys.job(job_id), *RECORD_FIELDS),
        ("HGET", keys.spec_bucket(job_id), job_id),
    ]


_WIDTH = 2 + len(STATES) + 1  # replies per queue


def _text(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _reply(value: Any, default: Any) -> Any:
    """A reply, or ``default`` for an error reply about the key (WRONGTYPE: someone else's
    data there). Any other error is raised."""
    if isinstance(value, ResponseError):
        return default
    if isinstance(value, Exception):
        raise value
    return value


def _parse(queue: str, replies: list[Any]) -> StoredTaskResult | None:
    result_hash = _reply(replies[0], {}) or {}
    scores = [_reply(reply, None) for reply in replies[1 : 1 + len(STATES)]]
    values = _reply(replies[1 + len(STATES)], None) or [None] * len(RECORD_FIELDS)
    spec = _reply(replies[-1], None)
    stored = {
        name: _text(value) for name, value in zip(RECORD_FIELDS, values, strict=True) if value
    }
    record = job_fields(stored, None if spec is None else _text(spec))
    state = next((s for s, score in zip(STATES, scores, strict=True) if score is not None), None)
    if not result_hash and not record and state is None:
        return None
    result = {_text(k): _text(v) for k, v in result_hash.items()}
    current = record.get(JobField.ATTEMPTS)
    return StoredTaskResult(
        queue=queue,
        result=result_fields(result),
        job=ResultJob(
            record.get(JobField.TASK), record.get(JobField.ARGS), record.get(JobField.KWARGS)
        ),  # fmt: skip
        state=state,
        score=None if state is None else float(scores[STATES.index(state)]),
        status_is_current=bool(current) and current == result.get(TaskResultField.ATTEMPT),
    )


def _first_found(queues: list[str], replies: list[Any]) -> StoredTaskResult | None:
    for index, queue in enumerate(queues):
        found = _parse(queue, replies[index * _WIDTH : (index + 1) * _WIDTH])
        if found is not None:
            return found
    return None


def stored_task_result(queues: Collection[str], job_id: str) -> StoredTaskResult | None:
    """The first of ``queues`` that holds anything of job ``job_id`` (its results hash or
    its record), and what it holds, in one round trip; None when none does. An empty
    ``queues`` means every queue of the registry (one more round trip)."""
    names = sorted(queues) if queues else registered_queues()
    if not names:
        return None
    with redis_errors():
        pipe = get_raw_redis().pipeline(transaction=False)
        for queue in names:
            for command in _commands(queue_keys(queue), job_id):
                pipe.execute_command(*command)
        replies = pipe.execute(raise_on_error=False)
    return _first_found(names, replies)


async def astored_task_result(queues: Collection[str], job_id: str) -> StoredTaskResult | None:
    """``stored_task_result`` on the running loop's client (replies read undecoded)."""
    clients = await loop_clients()
    with redis_errors():
        if queues:
            names = sorted(queues)
        else:
            try:
                members = await clients.client.execute_command(
                    "SMEMBERS", global_keys().queues, **{NEVER_DECODE: []}
                )
            except ResponseError:  # a registry of the wrong type: no queue known
                members = []
            names = split_queue_names(members or []).names
        if not names:
            return None
        pipe = clients.client.pipeline(transaction=False)
        for queue in names:
            for command in _commands(queue_keys(queue), job_id):
                pipe.execute_command(*command, **{NEVER_DECODE: []})
        replies = list(await pipe.execute(raise_on_error=False))
    return _first_found(names, replies)


def registered_queues() -> list[str]:
    """Every queue of the registry (``dq:queues``); empty when it is of the wrong type."""
    with redis_errors():
        try:
            members = get_raw_redis().smembers(global_keys().queues)
        except ResponseError:
            return []
    return split_queue_names(members or []).names


def task_finished(
    keys: QueueKeys,
    job_id: str,
    ttl_seconds: int,
    *,
    status: str,
    finished_ms: int,
    workers: str | None = None,
    errors: str | None = None,
    started_ms: int | None = None,
    last_attempt_ms: int | None = None,
    returned: str | None = None,
) -> ScriptCall[bool]:
    """The call that writes how an attempt of job ``job_id`` ended into its results hash
    (lua/task_finished.lua: ``workers``, ``errors``, ``returned`` are JSON; a field not
    given is left as it is) and gives it ``ttl_seconds`` to live from now."""
    argv: list[Any] = [
        ttl_seconds, TaskResultField.STATUS, status, TaskResultField.FINISHED, str(finished_ms)
    ]  # fmt: skip
    # (one test a field: a job's outcome is made once per attempt)
    if workers is not None:
        argv += (TaskResultField.WORKERS, workers)
    if errors is not None:
        argv += (TaskResultField.ERRORS, errors)
    if started_ms is not None:
        argv += (TaskResultField.STARTED, str(started_ms))
    if last_attempt_ms is not None:
        argv += (TaskResultField.LAST_ATTEMPT, str(last_attempt_ms))
    if returned is not None:
        argv += (TaskResultField.RETURN, returned)
    return ScriptCall(
        "task_finished",
        [keys.task_result(job_id)],
        argv,
        _is_one,
        resend_safe=True,  # the same fields written again
    )


def _is_one(reply: Any) -> bool:
    return int(reply) == 1


class TaskStarted(NamedTuple):
    """What ``task_started`` found and wrote (None: given a token, it found that dispatch
    not begun, and wrote nothing): the attempt (the job's, counted by claim), its
    max attempts (None: not stored, the default applies; 0: not readable, so fail.lua sends
    the job to dead at its next failure), and the results hash's history as written:
    ``read`` (``_parse_started``), or None for a first start, whose history is the call's
    own (``now_ms`` its start and last start, ``worker`` its workers, no errors) and is
    only made when ``result`` is asked for."""

    attempt: int
    max_attempts: int | None
    read: ResultFields | None
    now_ms: int = 0
    worker: str = ""

    @property
    def first(self) -> bool:
        """Whether the start written is the job's first (its start is its last start)."""
        read = self.read
        return read is None or read.started == read.last_attempt

    @property
    def result(self) -> ResultFields:
        """The history fields as written (the others None)."""
        if self.read is not None:
            return self.read
        at = str(self.now_ms)
        return ResultFields(started=at, last_attempt=at, workers=json.dumps([self.worker]))


def _parse_started(now_ms: int, worker: str, reply: Any) -> TaskStarted | None:
    """task_started.lua's reply: {} (nothing written), else the attempt and its max
    attempts, then, unless it was a first start, the results hash's started, last, workers
    and errors as written ("": absent)."""
    if not reply:
        return None
    stored_max = reply[1]
    max_attempts = int(stored_max) if stored_max else None
    if len(reply) == 2:
        return TaskStarted(int(reply[0]), max_attempts, None, now_ms, worker)
    started, last, workers, errors = map(_text, reply[2:])
    return TaskStarted(
        int(reply[0]),
        max_attempts,
        ResultFields(
            started=started or None,
            last_attempt=last or None,
            workers=workers or None,
            errors=errors or None,
        ),
        now_ms,
        worker,
    )


def task_started(
    keys: QueueKeys,
    job_id: str,
    *,
    now_ms: int,
    worker: str,
    ttl_seconds: int,
    kept: int,
    task: str,
    args: str,
    kwargs: str,
    backend: str,
    priority: str,
    status: str,
    token: str = "",
) -> ScriptCall[TaskStarted | None]:
    """The call that records the start of an attempt of job ``job_id`` (lua/task_started.lua):
    its task's path, arguments (JSON), backend alias, priority and status written (the
    fields TaskResultField's TASK, ARGS, KWARGS, BACKEND, PRIORITY, STATUS), the attempt's
    number and ``worker`` added, its first start kept. With the dispatch's fencing
    ``token`` (the call sent right after that dispatch's begin, in its round trip), only
    when that begin let it run."""
    return ScriptCall(
        "task_started",
        [keys.task_result(job_id), keys.job(job_id)],
        [now_ms, worker, ttl_seconds, kept, token, task, args, kwargs, backend, priority, status],
        partial(_parse_started, now_ms, worker),
        resend_safe=True,  # sent again, it finds its own attempt and start: nothing added
    )
