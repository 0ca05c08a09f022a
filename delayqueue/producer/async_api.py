"""The client API on an event loop: ``aenqueue``, ``adelay_many``, ``acancel`` and
``areschedule``, and the ``a*`` methods of ``@delayed_task`` tasks.

Each is its sync twin of ``delayqueue.producer.api`` with the round trip awaited on the running
loop's redis.asyncio client (``engine/async_clients.py``, ``engine/async_execution.py``):
the same checks at the call (made by the same code, before anything is awaited), the same
``ScriptCall`` objects and Lua scripts, the same errors, ``Job`` handles, events, signals,
metrics and log lines. No thread is involved.

``on_commit``: Django's transactions are sync-only, and an ``atomic()`` block cannot be
entered in async code, so an async call in an async view or task writes at once. When the
coroutine runs in a thread that is inside ``atomic()`` (``asyncio.run()`` or
``loop.run_until_complete()`` in sync code within a transaction), the jobs wait for that
transaction's commit, exactly as the sync API's do, and the handle says "pending". An async
view that writes rows in ``sync_to_async`` and schedules their jobs should schedule them
there with the sync API (they then wait for the commit), or ``await`` the async API once
the ``sync_to_async`` call has returned (the transaction committed)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from celery import Task

from delayqueue.engine import record
from delayqueue.engine.async_clients import aremember_queue
from delayqueue.engine.async_execution import arun_all, arun_direct
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.transitions import ScriptCall
from delayqueue.observability import events
from delayqueue.producer.api import checked_items, rescheduled_job
from delayqueue.producer.job_spec import Job, JobSpec, OnConflict, spec
from delayqueue.producer.moves import acancel, arun_on_shards, flag, moved, reschedule_calls
from delayqueue.producer.writes import (
    chunk_call,
    chunk_written,
    chunked,
    defer,
    durable_of,
    in_atomic_block,
    written,
)

T = TypeVar("T")

__all__ = ["acancel", "adelay_many", "aenqueue", "areschedule"]


async def aenqueue(
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
    """``delayqueue.enqueue`` on the running event loop (see the module for ``on_commit``)."""
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
    await _asubmit([s], on_commit, using)
    return s.job


async def adelay_many(
    specs: Iterable[JobSpec], *, on_commit: bool = True, using: str | None = None
) -> list[Job]:
    """``delayqueue.delay_many`` on the running event loop: the jobs in one round trip."""
    items = checked_items(specs, "adelay_many")
    if items:
        await _asubmit(items, on_commit, using)
    return [s.job for s in items]


async def areschedule(
    queue: str,
    job_id: str | None = None,
    *,
    key: str | None = None,
    delay: float | timedelta | None = None,
    eta: datetime | None = None,
    durable: bool | None = None,
) -> Job | None:
    """``delayqueue.reschedule`` on the running event loop."""
    shards, calls = reschedule_calls(queue, job_id, key, delay, eta)
    found = moved(shards, await arun_on_shards(calls, flag(durable)))
    if found is None:
        return None
    shard, reply = found
    task = await record.aread_task_name(queue_keys(shard), reply.id)
    return rescheduled_job(shard, reply, key, task)


async def _asubmit(specs: list[JobSpec], on_commit: bool, using: str | None) -> None:
    """``client._submit``, awaited: Django's own answer to "inside atomic()?" for the code
    that runs the coroutine (see the module's docs)."""
    if on_commit and in_atomic_block(using):
        defer(specs, using)
        return
    await _awrite(specs)


async def _awrite(specs: list[JobSpec], each_level: int = events.DEBUG) -> None:
    """``client._write``, awaited: one job alone, more in one round trip."""
    if len(specs) == 1:
        await aremember_queue(specs[0].job.queue)
        call: ScriptCall[Any] = chunk_call(specs, events.INFO)  # (either layout)
        chunk_written(specs, await arun_direct(call, durable=specs[0].durable))
        return
    for queue in {s.job.queue for s in specs}:
        await aremember_queue(queue)
    chunks = chunked(specs)
    calls = [chunk_call(chunk, each_level) for chunk in chunks]
    written(chunks, await arun_all(calls, durable=durable_of(specs)))
