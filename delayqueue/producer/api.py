"""The client API: schedule, cancel and reschedule jobs.

Every call checks its input before it touches Redis, so bad input raises at the call and
leaves nothing behind. Writes wait for the surrounding transaction to commit (``on_commit``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from celery import Task

from delayqueue.engine import record
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.transitions import Rescheduled
from delayqueue.errors import NotSerializable
from delayqueue.producer.job_spec import Job, JobSpec, OnConflict, spec, spec_many
from delayqueue.producer.moves import (
    cancel,
    flag,
    moved,
    reschedule_calls,
    run_on_shards,
)
from delayqueue.producer.writes import submit

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
    limit_key: str | None = None,
    expires: float | timedelta | None = None,
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
        limit_key=limit_key,
        expires=expires,
    )
    submit([s], on_commit, using)
    return s.job


def delay_many(
    specs: Iterable[JobSpec], *, on_commit: bool = True, using: str | None = None
) -> list[Job]:
    """Write many jobs made with ``spec()`` in one round trip to Redis."""
    items = checked_items(specs, "delay_many")
    if items:
        submit(items, on_commit, using)
    return [s.job for s in items]


def checked_items(specs: Iterable[JobSpec], caller: str) -> list[JobSpec]:
    items = list(specs)
    for index, item in enumerate(items):
        if not isinstance(item, JobSpec):
            raise NotSerializable(
                f"{caller}() takes what delayqueue.spec() returns; item {index} is a "
                f"{type(item).__name__}"
            )
    return items


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
    shards, calls = reschedule_calls(queue, job_id, key, delay, eta)
    found = moved(shards, run_on_shards(calls, flag(durable)))
    if found is None:
        return None
    shard, reply = found
    return rescheduled_job(shard, reply, key, record.read_task_name(queue_keys(shard), reply.id))


def rescheduled_job(queue: str, moved: Rescheduled, key: str | None, task: str) -> Job:
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
