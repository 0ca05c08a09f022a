"""Moving a job that is still scheduled: cancel and reschedule it, by id or dedupe key, on
every shard it may be on, sync or awaited.

The calls report their own events (``delayqueue.observability.reported``). ``cancel`` and
``acancel`` live here, below ``job_spec``, so that a ``Job`` handle can cancel itself;
``reschedule`` returns a ``Job`` and lives in ``api`` / ``async_api`` on the steps here.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TypeVar

from delayqueue.engine.async_execution import arun, arun_all
from delayqueue.engine.execution import run, run_all
from delayqueue.engine.keys import check_job_id, check_queue_name, queue_keys
from delayqueue.engine.shards import routes_by_limit, shard_count, shard_for, shard_names
from delayqueue.engine.transitions import Cancelled, Rescheduled, ScriptCall
from delayqueue.errors import InvalidJobId
from delayqueue.observability import reported
from delayqueue.producer.due import to_due
from delayqueue.signals import SENDER_CLIENT
from delayqueue.validators import check_flag, check_key

T = TypeVar("T")


def cancel(
    queue: str, job_id: str | None = None, *, key: str | None = None, durable: bool | None = None
) -> bool:
    """Remove a job that is still scheduled, by id or dedupe key; whether one was removed.
    ``durable``: as for ``enqueue`` (None: the DURABLE setting)."""
    calls = cancel_calls(queue, job_id, key)
    return any(reply.removed for reply in run_on_shards(calls, flag(durable)))


async def acancel(
    queue: str, job_id: str | None = None, *, key: str | None = None, durable: bool | None = None
) -> bool:
    """``delayqueue.cancel`` on the running event loop."""
    calls = cancel_calls(queue, job_id, key)
    return any(reply.removed for reply in await arun_on_shards(calls, flag(durable)))


def cancel_calls(queue: str, job_id: str | None, key: str | None) -> list[ScriptCall[Cancelled]]:
    """A cancel call per shard the job may be on (checked input: raises before any I/O)."""
    job_id, key = id_or_key(job_id, key)
    return [
        reported.cancel(SENDER_CLIENT, queue_keys(shard), job_id=job_id, key=key)
        for shard in shards_to_ask(check_queue_name(queue), key)
    ]


def reschedule_calls(
    queue: str,
    job_id: str | None,
    key: str | None,
    delay: float | timedelta | None,
    eta: datetime | None,
) -> tuple[list[str], list[ScriptCall[Rescheduled]]]:
    """The shards asked and a reschedule call per shard (checked input)."""
    job_id, key = id_or_key(job_id, key)
    mode, ms = to_due(delay, eta)
    shards = shards_to_ask(check_queue_name(queue), key)
    calls = [
        reported.reschedule(SENDER_CLIENT, queue_keys(q), job_id=job_id, key=key, mode=mode, ms=ms)
        for q in shards
    ]
    return shards, calls


def moved(shards: list[str], replies: list[Rescheduled]) -> tuple[str, Rescheduled] | None:
    """The shard and reply of the job moved; None when none was."""
    for shard, reply in zip(shards, replies, strict=True):
        if reply.due_ms is not None:
            return shard, reply
    return None


def run_on_shards(calls: list[ScriptCall[T]], durable: bool | None) -> list[T]:
    """One call per shard asked: alone, or all in one round trip (``durable`` checked)."""
    if len(calls) == 1:
        return [run(calls[0], durable=durable)]
    return run_all(calls, durable=durable)


async def arun_on_shards(calls: list[ScriptCall[T]], durable: bool | None) -> list[T]:
    """``run_on_shards``, awaited."""
    if len(calls) == 1:
        return [await arun(calls[0], durable=durable)]
    return await arun_all(calls, durable=durable)


def shards_to_ask(queue: str, key: str) -> list[str]:
    """Where a job of ``queue`` may be: the shard its key hashes to, else (by id) every
    shard; a queue without shards, or a shard named itself, is the one place."""
    if shard_count(queue) == 1:
        return [queue]
    return [shard_for(queue, key)] if key and not routes_by_limit(queue) else shard_names(queue)


def flag(durable: bool | None) -> bool | None:
    return None if durable is None else check_flag(durable, "durable")


def id_or_key(job_id: str | None, key: str | None) -> tuple[str, str]:
    if (job_id is None) == (key is None):
        raise InvalidJobId("give either a job id or key=, not both and not neither")
    if job_id is not None:
        return check_job_id(job_id), ""
    return "", check_key(key)
