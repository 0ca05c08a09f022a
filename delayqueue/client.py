"""The client API: schedule, cancel and reschedule jobs.

Every call checks its input before it touches Redis, so bad input raises at the call and
leaves nothing behind. Writes wait for the surrounding transaction to commit (``on_commit``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from celery import Task
from django.db import DEFAULT_DB_ALIAS, connections, transaction

from delayqueue import events
from delayqueue.celery_app import resolve_task
from delayqueue.conf import WAKE_HORIZON_MS, Settings, get_settings
from delayqueue.engine import record, transitions
from delayqueue.engine.clients import remember_queue
from delayqueue.engine.execution import run, run_all, run_direct
from delayqueue.engine.keys import check_job_id, check_queue_name, new_job_id, queue_keys
from delayqueue.engine.packing import pack
from delayqueue.engine.shards import logical, shard_count, shard_for, shard_names
from delayqueue.errors import InvalidJobId, NotSerializable, UnknownTask
from delayqueue.schedule import Mode, to_due
from delayqueue.signals import SENDER_CLIENT
from delayqueue.validators import (
    check_flag,
    check_key,
    check_max_attempts,
    check_on_conflict,
    check_visibility_timeout,
)
from delayqueue.wire import encode_args

T = TypeVar("T")
OnConflict = Literal["keep", "replace"]
State = Literal["pending", "scheduled", "inflight", "dead"]


@dataclass
class Job:
    """A handle on a scheduled job.

    ``state`` is "pending" until the surrounding transaction commits and the job is written;
    when a dedupe ``key`` kept an existing job, ``id`` becomes that job's id.
    """

    id: str
    queue: str
    task: str
    key: str | None = None
    due_at: datetime | None = None
    state: State = "pending"
    outcome: Literal["created", "kept", "replaced"] | None = None

    def cancel(self) -> bool:
        return cancel(self.queue, self.id)

    async def acancel(self) -> bool:
        """``cancel()`` on the running event loop (delayqueue.async_client)."""
        from delayqueue.async_client import acancel

        return await acancel(self.queue, self.id)


@dataclass
class JobSpec:
    """A checked, ready-to-write job (what ``spec()`` returns and ``delay_many`` takes)."""

    job: Job
    mode: Mode
    ms: int
    on_conflict: OnConflict
    packed: str  # the spec as enqueue.lua stores it (delayqueue.engine.packing)
    durable: bool | None = None  # wait for replicas (None: the task's, else DURABLE)


def spec(
    task: Task | str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    delay: float | timedelta | None = None,
    eta: datetime | None = None,
    queue: str | None = None,
    key: str | None = None,
    on_conflict: OnConflict = "keep",
    max_attempts: int | None = None,
    visibility_timeout: float | None = None,
    durable: bool | None = None,
) -> JobSpec:
    """Check everything about a job without writing it. ``durable``: the write waits for
    replicas (see ``enqueue``)."""
    config = get_settings()
    target = _target(task, queue, max_attempts, visibility_timeout, config)
    mode, ms = to_due(delay, eta)
    args_json, kwargs_json = encode_args(args, kwargs or {}, config.max_payload_bytes)
    if key is not None:
        check_key(key)
    check_on_conflict(on_conflict)
    packed = pack(target.name, args_json, kwargs_json, target.attempts, target.vt, key or "")
    job_id = new_job_id()
    # a sharded queue's job lives in the shard its key (else its id) hashes to
    queue = shard_for(target.queue, key or job_id) if target.sharded else target.queue
    job = Job(id=job_id, queue=queue, task=target.name, key=key)
    if durable is None:
        durable = target.durable
    else:
        check_flag(durable, "durable")
    return JobSpec(job, mode, ms, on_conflict, packed, durable)


@dataclass(frozen=True)
class _Target:
    """What spec() checks about a task and its options, the same for each of its calls."""

    task: Task | str
    config: Settings
    name: str
    queue: str
    attempts: str
    vt: str  # visibility timeout ms, or "" for the worker's default
    durable: bool | None  # the task's durable=, if it says
    sharded: bool  # the queue has shards (engine/shards.py)


_targets: dict[tuple[Any, ...], _Target] = {}


def _target(
    task: Task | str,
    queue: str | None,
    max_attempts: int | None,
    visibility_timeout: float | None,
    config: Settings,
) -> _Target:
    """The checked target of ``task`` with these options, remembered per task object and
    options until the settings change (a new ``config``): most calls repeat the last one."""
    try:
        # The options' types too: True == 1 and hashes alike, but True is refused.
        cache_key = (
            id(task), queue, max_attempts, visibility_timeout,
            type(max_attempts), type(visibility_timeout),
        )  # fmt: skip
        found = _targets.get(cache_key)
    except TypeError:  # unhashable options: _check_target says what is wrong with them
        return _check_target(task, queue, max_attempts, visibility_timeout, config)
    if found is not None and found.task is task and found.config is config:
        return found
    target = _check_target(task, queue, max_attempts, visibility_timeout, config)
    if len(_targets) >= 1_000:
        _targets.clear()
    _targets[cache_key] = target
    return target


def _check_target(
    task: Task | str,
    queue: str | None,
    max_attempts: int | None,
    visibility_timeout: float | None,
    config: Settings,
) -> _Target:
    name, task_obj = resolve_task(task)
    if "\n" in name:
        raise UnknownTask(f"task names cannot contain a newline: {name!r}")
    queue = check_queue_name(queue or getattr(task_obj, "dq_queue", None) or config.default_queue)
    # `is not None`, not `or`: an explicit 0 is an error, not "use the default".
    attempts = check_max_attempts(
        _first_given(max_attempts, getattr(task_obj, "dq_max_attempts", None), config.max_attempts)
    )
    timeout = _first_given(visibility_timeout, getattr(task_obj, "dq_visibility_timeout", None))
    vt = "" if timeout is None else str(round(check_visibility_timeout(timeout) * 1000))
    durable = getattr(task_obj, "dq_durable", None)
    sharded = shard_count(queue) > 1
    return _Target(task, config, name, queue, str(attempts), vt, durable, sharded)


def _first_given(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


_NONE: Any = object()  # no first call


def spec_many(
    task: Task | str,
    calls: Iterable[Sequence[Any]],
    *,
    delay: float | timedelta | None = None,
    eta: datetime | None = None,
) -> list[JobSpec]:
    """``spec(task, args, delay=..., eta=...)`` for each args of ``calls``: what does not
    depend on the arguments (task, queue, due time, settings) is checked once."""
    rest = iter(calls)
    first_args = next(rest, _NONE)
    if first_args is _NONE:
        return []
    first = spec(task, _positional(first_args, 0), delay=delay, eta=eta)
    head, _, tail = first.packed.split("\n", 2)  # task name, args, the rest
    max_bytes = int(get_settings().max_payload_bytes)
    specs = [first]
    queue = logical(first.job.queue)
    sharded = shard_count(queue) > 1
    for index, args in enumerate(rest, 1):
        _positional(args, index)
        packed = f"{head}\n{encode_args(args, {}, max_bytes)[0]}\n{tail}"
        job_id = new_job_id()
        shard = shard_for(queue, job_id) if sharded else first.job.queue
        job = Job(id=job_id, queue=shard, task=first.job.task)
        specs.append(JobSpec(job, first.mode, first.ms, "keep", packed, first.durable))
    return specs


def _positional(args: Any, index: int) -> Sequence[Any]:
    """One call of ``spec_many``: a list or tuple of positional arguments."""
    if not isinstance(args, list | tuple):
        hint = (
            "; for keyword arguments use delayqueue.spec(task, kwargs={...}) per job with "
            "delayqueue.delay_many()"
            if isinstance(args, Mapping)
            else ""
        )
        raise NotSerializable(
            f"call {index} is a {type(args).__name__}, not a list or tuple of positional "
            f"arguments{hint}"
        )
    return args


def _apply_reply(job: Job, reply: transitions.Enqueued) -> None:
    job.id = reply.id
    job.due_at = datetime.fromtimestamp(reply.due_ms / 1000, tz=UTC)
    job.outcome = reply.outcome  # type: ignore[assignment]
    job.state = reply.state  # type: ignore[assignment]


BATCH = 500  # jobs per enqueue call


def _durable(specs: list[JobSpec]) -> bool | None:
    """One write's durability: waits when any of its jobs asks to; None leaves it to the
    DURABLE setting."""
    wanted = {s.durable for s in specs}
    if True in wanted:
        return True
    return False if wanted == {False} else None


def _write(specs: list[JobSpec], each_level: int = events.DEBUG) -> None:
    """Write jobs: one on the direct connection, more in one round trip (their lines at
    ``each_level``, with one line per batch when that is DEBUG). Durable ones wait for
    replicas in the same round trip (engine/execution.py)."""
    if len(specs) == 1:  # the latency path: delay_for() in a request
        job = specs[0].job
        remember_queue(job.queue)
        reply = run_direct(_enqueue_call(specs), durable=specs[0].durable)[0]
        _apply_reply(job, reply)
        _scheduled(job, reply)
        return
    for queue in {s.job.queue for s in specs}:
        remember_queue(queue)
    chunks = _chunks(specs)
    replies = run_all([_enqueue_call(chunk) for chunk in chunks], durable=_durable(specs))
    _written(chunks, replies, each_level)


def _chunks(specs: list[JobSpec]) -> list[list[JobSpec]]:
    """The jobs of a write, one enqueue call per queue and BATCH jobs."""
    by_queue: dict[str, list[JobSpec]] = {}
    for s in specs:
        by_queue.setdefault(s.job.queue, []).append(s)
    return [
        group[start : start + BATCH]
        for group in by_queue.values()
        for start in range(0, len(group), BATCH)
    ]


def _written(
    chunks: list[list[JobSpec]], replies: list[list[transitions.Enqueued]], each_level: int
) -> None:
    """The jobs' handles and events once their enqueue calls replied."""
    each = events.scheduled_wanted(each_level)  # a line or a signal per job
    for chunk, reply in zip(chunks, replies, strict=True):
        outcomes: dict[str, int] = {}
        for s, one in zip(chunk, reply, strict=True):
            _apply_reply(s.job, one)
            if each:
                _scheduled(s.job, one, each_level)
            outcomes[one.outcome] = outcomes.get(one.outcome, 0) + 1
        if each_level == events.DEBUG:
            events.scheduled_batch(chunk[0].job.queue, outcomes)


def _scheduled(job: Job, reply: transitions.Enqueued, level: int = events.INFO) -> None:
    events.scheduled(
        SENDER_CLIENT, job.queue, reply.id, job.task, reply.due_ms, job.key, reply.outcome, level
    )


def _enqueue_call(chunk: list[JobSpec]) -> transitions.ScriptCall[list[transitions.Enqueued]]:
    new = [
        transitions.NewJob(s.job.id, s.mode, s.ms, s.job.key or "", s.on_conflict, s.packed)
        for s in chunk
    ]
    return transitions.enqueue(queue_keys(chunk[0].job.queue), new, wake_horizon_ms=WAKE_HORIZON_MS)


def _submit(specs: list[JobSpec], on_commit: bool, using: str | None) -> None:
    # Outside atomic() there is nothing to wait for (and no need to touch the database).
    if on_commit and _in_atomic_block(using):
        _defer(specs, using)
        return
    _write(specs)


def _defer(specs: list[JobSpec], using: str | None) -> None:
    """Add the jobs to the pending write of the transaction this thread is in."""
    _at_commit(transaction.get_connection(using), using).specs += specs


def _in_atomic_block(using: str | None) -> bool:
    """Whether this thread is inside ``atomic()`` on database ``using``: Django's own flag.
    In a thread without an event loop, read off the connection Django keeps for the thread
    (asgiref's thread-critical Local stores it in a plain ``threading.local``); Django's
    look-up learns that there is no event loop by raising and catching an exception, 1.3 µs
    of every ``delay_for``. A thread that has no connection yet, an event loop, or another
    asgiref takes Django's look-up (which also refuses an unknown ``using``)."""
    if asyncio._get_running_loop() is None:
        local = getattr(connections, "_connections", None)  # (vars: no Local.__getattr__)
        storage = getattr(local, "__dict__", {}).get("_storage")
        if isinstance(storage, threading.local):
            connection = getattr(storage, using or DEFAULT_DB_ALIAS, None)
            if connection is not None:
                return bool(connection.in_atomic_block)
    return bool(transaction.get_connection(using).in_atomic_block)


class _AtCommit:
    """The jobs one transaction schedules one after another, written in one round trip when
    it commits (``delay_for`` called ten times in a view: one write, not ten)."""

    def __init__(self) -> None:
        self.specs: list[JobSpec] = []

    def __call__(self) -> None:
        _write(self.specs, events.INFO)


def _at_commit(connection: Any, using: str | None) -> _AtCommit:
    """The pending write of the transaction's last on_commit callback when it is ours and
    was registered under the same savepoints (so a savepoint rollback discards its jobs
    with the savepoint's, and no callback of the caller's moves before or after a job);
    else a new one."""
    hooks = getattr(connection, "run_on_commit", None)  # [(savepoint ids, callback, robust)]
    if hooks:
        savepoints, callback = hooks[-1][0], hooks[-1][1]
        if isinstance(callback, _AtCommit) and savepoints == set(connection.savepoint_ids):
            return callback
    pending = _AtCommit()
    transaction.on_commit(pending, using=using)
    return pending


def enqueue(
    task: Task | str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    delay: float | timedelta | None = None,
    eta: datetime | None = None,
    queue: str | None = None,
    key: str | None = None,
    on_conflict: OnConflict = "keep",
    max_attempts: int | None = None,
    visibility_timeout: float | None = None,
    on_commit: bool = True,
    using: str | None = None,
    durable: bool | None = None,
) -> Job:
    """Schedule any Celery task (object or registered name) to run after ``delay`` or at ``eta``.

    ``delay`` is seconds or a timedelta, ``eta`` an aware datetime. With ``key``, scheduling is
    idempotent: while a job with that key is scheduled, "keep" leaves it as it is and "replace"
    moves it to the new due time with the new arguments (debounce). With ``on_commit`` (the
    default) the job is written when the current transaction commits, and never on rollback.
    With ``durable`` (default: the task's ``durable``, else the DURABLE setting) the call
    returns only once a replica has the job (Redis WAIT), or raises NotDurable: a failover
    then cannot lose a job the caller was told about.
    """
    s = spec(
        task,
        args,
        kwargs,
        delay=delay,
        eta=eta,
        queue=queue,
        key=key,
        on_conflict=on_conflict,
        max_attempts=max_attempts,
        visibility_timeout=visibility_timeout,
        durable=durable,
    )
    _submit([s], on_commit, using)
    return s.job


def delay_many(
    specs: Iterable[JobSpec], *, on_commit: bool = True, using: str | None = None
) -> list[Job]:
    """Write many jobs made with ``spec()`` in one round trip to Redis."""
    batch = _checked_batch(specs, "delay_many")
    if batch:
        _submit(batch, on_commit, using)
    return [s.job for s in batch]


def _checked_batch(specs: Iterable[JobSpec], caller: str) -> list[JobSpec]:
    batch = list(specs)
    for index, item in enumerate(batch):
        if not isinstance(item, JobSpec):
            raise NotSerializable(
                f"{caller}() takes what delayqueue.spec() returns; item {index} is a "
                f"{type(item).__name__}"
            )
    return batch


def cancel(
    queue: str, job_id: str | None = None, *, key: str | None = None, durable: bool | None = None
) -> bool:
    """Remove a job that is still scheduled, by id or dedupe key; whether one was removed.
    ``durable``: as for ``enqueue`` (None: the DURABLE setting)."""
    shards, key, calls = _cancel_calls(queue, job_id, key)
    return _cancelled(shards, key, _run_on_shards(calls, _flag(durable)))


def _cancel_calls(
    queue: str, job_id: str | None, key: str | None
) -> tuple[list[str], str, list[transitions.ScriptCall[transitions.Cancelled]]]:
    """The shards asked, the key ("" for none) and a cancel call per shard."""
    job_id, key = _id_or_key(job_id, key)
    shards = _shards_to_ask(check_queue_name(queue), key)
    return shards, key, [transitions.cancel(queue_keys(q), job_id=job_id, key=key) for q in shards]


def _cancelled(shards: list[str], key: str, replies: list[transitions.Cancelled]) -> bool:
    for shard, cancelled in zip(shards, replies, strict=True):
        if cancelled.removed:
            events.cancelled(SENDER_CLIENT, shard, cancelled.id, key or None)
            return True
    return False


def _run_on_shards(calls: list[transitions.ScriptCall[T]], durable: bool | None) -> list[T]:
    """One call per shard asked: alone, or all in one round trip (``durable`` checked)."""
    if len(calls) == 1:
        return [run(calls[0], durable=durable)]
    return run_all(calls, durable=durable)


def _shards_to_ask(queue: str, key: str) -> list[str]:
    """Where a job of ``queue`` may be: the shard its key hashes to, else (by id) every
    shard; a queue without shards, or a shard named itself, is the one place."""
    if shard_count(queue) == 1:
        return [queue]
    return [shard_for(queue, key)] if key else shard_names(queue)


def reschedule(
    queue: str,
    job_id: str | None = None,
    *,
    key: str | None = None,
    delay: float | timedelta | None = None,
    eta: datetime | None = None,
    durable: bool | None = None,
) -> Job | None:
    """Move a scheduled job to a new due time; None when no such job is scheduled.
    ``durable``: as for ``enqueue`` (None: the DURABLE setting)."""
    shards, key, calls = _reschedule_calls(queue, job_id, key, delay, eta)
    found = _moved(shards, key, _run_on_shards(calls, _flag(durable)))
    if found is None:
        return None
    queue, moved = found
    return _rescheduled_job(queue, moved, key, record.read_task_name(queue_keys(queue), moved.id))


def _reschedule_calls(
    queue: str,
    job_id: str | None,
    key: str | None,
    delay: float | timedelta | None,
    eta: datetime | None,
) -> tuple[list[str], str, list[transitions.ScriptCall[transitions.Rescheduled]]]:
    """The shards asked, the key ("" for none) and a reschedule call per shard."""
    job_id, key = _id_or_key(job_id, key)
    mode, ms = to_due(delay, eta)
    shards = _shards_to_ask(check_queue_name(queue), key)
    calls = [
        transitions.reschedule(queue_keys(q), job_id=job_id, key=key, mode=mode, ms=ms)
        for q in shards
    ]
    return shards, key, calls


def _moved(
    shards: list[str], key: str, replies: list[transitions.Rescheduled]
) -> tuple[str, transitions.Rescheduled] | None:
    """The shard and reply of the job moved, its event reported; None when none was."""
    for queue, moved in zip(shards, replies, strict=True):
        if moved.due_ms is not None:
            events.rescheduled(SENDER_CLIENT, queue, moved.id, moved.due_ms, key or None)
            return queue, moved
    return None


def _rescheduled_job(queue: str, moved: transitions.Rescheduled, key: str, task: str) -> Job:
    # The job is moved: a key of the wrong type (corrupt data) only leaves its task name
    # unknown (record.read_task_name), it does not make the call look as if it failed.
    return Job(
        id=moved.id,
        queue=queue,
        task=task,
        key=key or None,
        due_at=datetime.fromtimestamp((moved.due_ms or 0) / 1000, tz=UTC),
        state="scheduled",
    )


def _flag(durable: bool | None) -> bool | None:
    return None if durable is None else check_flag(durable, "durable")


def _id_or_key(job_id: str | None, key: str | None) -> tuple[str, str]:
    if (job_id is None) == (key is None):
        raise InvalidJobId("give either a job id or key=, not both and not neither")
    if job_id is not None:
        return check_job_id(job_id), ""
    return "", check_key(key)
