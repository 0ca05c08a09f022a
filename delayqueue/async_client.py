"""The client API on an event loop: ``aenqueue``, ``adelay_many``, ``acancel`` and
``areschedule``, and the ``a*`` methods of ``@delayed_task`` tasks.

Each is its sync twin of ``delayqueue.client`` with the round trip awaited on the running
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

from delayqueue import events
from delayqueue.client import (
    _cancel_calls,
    _cancelled,
    _checked_batch,
    _flag,
    _moved,
    _reschedule_calls,
    _rescheduled_job,
)
from delayqueue.engine import record, transitions
from delayqueue.engine.async_clients import aremember_queue
from delayqueue.engine.async_execution import arun, arun_all, arun_direct
from delayqueue.engine.keys import queue_keys
from delayqueue.job_spec import Job, JobSpec, OnConflict, spec
from delayqueue.writes import (
    apply_reply,
    chunked,
    defer,
    durable_of,
    enqueue_call,
    in_atomic_block,
    scheduled,
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
    )
    await _asubmit([s], on_commit, using)
    return s.job


async def adelay_many(
    specs: Iterable[JobSpec], *, on_commit: bool = True, using: str | None = None
) -> list[Job]:
    """``delayqueue.delay_many`` on the running event loop: the jobs in one round trip."""
    batch = _checked_batch(specs, "adelay_many")
    if batch:
        await _asubmit(batch, on_commit, using)
    return [s.job for s in batch]


async def acancel(
    queue: str, job_id: str | None = None, *, key: str | None = None, durable: bool | None = None
) -> bool:
    """``delayqueue.cancel`` on the running event loop."""
    shards, key, calls = _cancel_calls(queue, job_id, key)
    return _cancelled(shards, key, await _arun_on_shards(calls, _flag(durable)))


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
    shards, key, calls = _reschedule_calls(queue, job_id, key, delay, eta)
    found = _moved(shards, key, await _arun_on_shards(calls, _flag(durable)))
    if found is None:
        return None
    queue, moved = found
    task = await record.aread_task_name(queue_keys(queue), moved.id)
    return _rescheduled_job(queue, moved, key, task)


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
        job = specs[0].job
        await aremember_queue(job.queue)
        reply = (await arun_direct(enqueue_call(specs), durable=specs[0].durable))[0]
        apply_reply(job, reply)
        scheduled(job, reply)
        return
    for queue in {s.job.queue for s in specs}:
        await aremember_queue(queue)
    chunks = chunked(specs)
    replies = await arun_all([enqueue_call(chunk) for chunk in chunks], durable=durable_of(specs))
    written(chunks, replies, each_level)


async def _arun_on_shards(calls: list[transitions.ScriptCall[T]], durable: bool | None) -> list[T]:
    """``client._run_on_shards``, awaited."""
    if len(calls) == 1:
        return [await arun(calls[0], durable=durable)]
    return await arun_all(calls, durable=durable)
