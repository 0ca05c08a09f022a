"""The client API: schedule, cancel and reschedule jobs.

Every call checks its input before it touches Redis, so bad input raises at the call and
leaves nothing behind. Writes wait for the surrounding transaction to commit (``on_commit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from celery import Task

from delayqueue import events
from delayqueue.engine import record, transitions
from delayqueue.engine.execution import run, run_all
from delayqueue.engine.keys import check_job_id, check_queue_name, queue_keys
from delayqueue.engine.shards import shard_count, shard_for, shard_names
from delayqueue.errors import InvalidJobId, NotSerializable
from delayqueue.job_spec import Job, JobSpec, OnConflict, spec, spec_many
from delayqueue.schedule import to_due
from delayqueue.signals import SENDER_CLIENT
from delayqueue.validators import (
    check_flag,
    check_key,
)
from delayqueue.writes import submit

T = TypeVar("T")

__all__ = ["Job", "JobSpec", "cancel", "delay_many", "enqueue", "reschedule", "spec", "spec_many"]


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
    submit([s], on_commit, using)
    return s.job


def delay_many(
    specs: Iterable[JobSpec], *, on_commit: bool = True, using: str | None = None
) -> list[Job]:
    """Write many jobs made with ``spec()`` in one round trip to Redis."""
    batch = _checked_batch(specs, "delay_many")
    if batch:
        submit(batch, on_commit, using)
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
