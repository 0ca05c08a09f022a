"""Periodic jobs' data: one typed call per schedule script (plan_schedule, fire,
unplan_schedule) and the reads of a queue's schedules. What a schedule is and when it fires
is ``delayqueue.periodic``; this module only knows where it is kept and how it moves.

A schedule lives in its queue's slot: the hash ``schedule:<name>`` (``schedule_record.py``)
and its entry in the queue's ``schedules`` zset, scored with its next occurrence. The next
occurrence is always written as an ordinary scheduled job, so the delay worker claims it
at its due time as any other job."""

from __future__ import annotations

import math
from typing import Any, Literal, NamedTuple

from delayqueue.engine.clients import get_raw_redis
from delayqueue.engine.keys import QueueKeys, queue_keys
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.schedule_record import ScheduleDeclaration, ScheduleRecord, schedule_record
from delayqueue.engine.transitions import ScriptCall


def _text(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


def _keys(keys: QueueKeys, name: str) -> list[str]:
    return [keys.schedules, keys.schedule(name), keys.scheduled, keys.spec_prefix, keys.job_prefix]


class Planned(NamedTuple):
    planned: bool  # False: the record was planned or moved on since it was read (``seen``)
    replaced: str  # planned: the occurrence it replaced ("" when none); else the job it plans


def plan(
    keys: QueueKeys,
    name: str,
    *,
    next_ms: int,
    job_id: str,
    spec: str,
    wake_horizon_ms: int,
    seen: str | None,
    declared: ScheduleDeclaration | None = None,
) -> ScriptCall[Planned]:
    """Write the schedule's record (what ``declared`` says, when given: else its record
    keeps what it holds) and its next occurrence's job, if the record still plans the
    occurrence ``seen`` (its ``job`` as read; None: no record, or paused)."""
    argv: list[Any] = [name, next_ms, job_id, spec, keys.wake, wake_horizon_ms, seen or ""]
    for field, value in (declared.fields() if declared is not None else {}).items():
        argv += [field, value]
    return ScriptCall(
        "plan_schedule",
        _keys(keys, name),
        argv,
        lambda reply: _planned(reply, job_id),
        resend_safe=True,  # the same record and the same occurrence id: written once
    )


def _planned(reply: Any, job_id: str) -> Planned:
    planned, job = _text(reply[0]) == "planned", _text(reply[1])
    if not planned and job == job_id:  # a resend of a call that planned it (its reply lost)
        return Planned(True, "")
    return Planned(planned, job)


class Fired(NamedTuple):
    fired: bool  # False: another worker moved it first, it is paused, or it is gone
    job_id: str  # the occurrence that came due
    runs: bool  # False when missed="skip" removed it unrun


def fire(
    keys: QueueKeys,
    name: str,
    *,
    seen_ms: int,
    next_ms: int,
    job_id: str,
    missed: int,
    skip: bool,
    wake_horizon_ms: int,
    trace: str = "",
) -> ScriptCall[Fired]:
    """Move the schedule from the occurrence at ``seen_ms`` to the one at ``next_ms``
    (job ``job_id``), if it is still at ``seen_ms``. ``trace``: a checked trace context
    (integrations/trace_context.py) that the occurrence which came due keeps, if it was
    never claimed and keeps none yet (docs/tracing.md)."""

    def parse(reply: Any) -> Fired:
        if _text(reply[0]) != "fired":
            return Fired(False, "", False)
        return Fired(True, _text(reply[1]), int(reply[2]) == 1)

    return ScriptCall(
        "fire",
        _keys(keys, name),
        [
            name,
            seen_ms,
            next_ms,
            job_id,
            missed,
            "skip" if skip else "",
            keys.wake,
            wake_horizon_ms,
            trace,
        ],  # fmt: skip
        parse,
    )


def unplan(keys: QueueKeys, name: str, mode: Literal["pause", "remove"]) -> ScriptCall[bool]:
    """Pause the schedule (its record stays) or remove it; its unclaimed occurrence goes."""
    return ScriptCall("unplan_schedule", _keys(keys, name), [name, mode], lambda r: int(r) == 1)


# ---- reads -------------------------------------------------------------------------------


def _scored(found: Any) -> list[tuple[str, float]]:
    return [(_text(member), float(score)) for member, score in found]


def due(queue: str, now_ms: int) -> list[tuple[str, int | None]]:
    """The queue's schedules whose next occurrence is at or before ``now_ms``: (name, ms);
    None for a score that is no time (``-inf``, planted: the planner says so)."""
    with redis_errors():
        found = get_raw_redis().zrangebyscore(
            queue_keys(queue).schedules, "-inf", now_ms, withscores=True
        )
    return [(name, _ms(score)) for name, score in _scored(found)]


def _ms(score: float) -> int | None:
    return int(score) if math.isfinite(score) else None


def stored(queue: str, name: str | None = None) -> list[ScheduleRecord]:
    """The queue's schedules (or the one named), with their records, by next occurrence. A
    record that is not a hash reads as empty (the planner then cannot fire it, and says so)."""
    if name is not None:
        return [found for found in records(queue, [name]) if found is not None]
    keys = queue_keys(queue)
    with redis_errors():
        client = get_raw_redis()
        entries = _scored(client.zrange(keys.schedules, 0, -1, withscores=True))
        pipe = client.pipeline(transaction=False)
        for entry_name, _ in entries:
            pipe.hgetall(keys.schedule(entry_name))
        found = pipe.execute(raise_on_error=False) if entries else []
    return [
        _stored(queue, entry_name, score, record)
        for (entry_name, score), record in zip(entries, found, strict=True)
    ]


def records(queue: str, names: list[str]) -> list[ScheduleRecord | None]:
    """The named schedules of ``queue`` with their records, in one round trip; None for one
    the queue holds no more."""
    keys = queue_keys(queue)
    with redis_errors():
        pipe = get_raw_redis().pipeline(transaction=False)
        for name in names:
            pipe.zscore(keys.schedules, name)
            pipe.hgetall(keys.schedule(name))
        replies = pipe.execute(raise_on_error=False) if names else []
    found: list[ScheduleRecord | None] = []
    for i, name in enumerate(names):
        score, record = replies[2 * i], replies[2 * i + 1]
        if score is None or isinstance(score, Exception):
            found.append(None)
        else:
            found.append(_stored(queue, name, float(score), record))
    return found


def _stored(queue: str, name: str, score: float, record: Any) -> ScheduleRecord:
    return schedule_record(queue, name, _ms(score), record)


def queues_with_schedules(queues: list[str]) -> list[str]:
    """Those of ``queues`` that hold at least one schedule."""
    if not queues:
        return []
    with redis_errors():
        pipe = get_raw_redis().pipeline(transaction=False)
        for queue in queues:
            pipe.zcard(queue_keys(queue).schedules)
        counts = pipe.execute(raise_on_error=False)
    return [q for q, n in zip(queues, counts, strict=True) if isinstance(n, int) and n > 0]
