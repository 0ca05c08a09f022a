"""What the delay worker knows of the Celery workers before it relies on them.

A delay worker hands a job to Celery in one of three forms: the @delayed_task's own message
(runs wherever the task is known), ``delayqueue.run_batch`` (several jobs of one task) and
``delayqueue.run_task`` (a plain Celery task with delayqueue's bookkeeping). The last two
run only on a Celery worker that has delayqueue's own tasks registered: a worker without
them discards such a message ("Received unregistered task"). So the Celery side says it is
there (``announce``, from each Celery worker, with the wire protocol it speaks; the admin
and ``delayqueue health`` list them), and the delay worker sends no batch while a Celery
side that speaks another protocol is running. A task whose message of one of those forms
was discarded, or never started (worker/handoff.py watches), is noted here (``fall_back``)
with why: every delay worker then sends its jobs in a simpler form, and says why.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from delayqueue.engine.clients import get_raw_redis, get_redis
from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.engine.redis_errors import redis_errors

# The messages delayqueue's Celery side runs: the dq_* headers, run_task(name, args, kwargs),
# run_batch(queue, task, entries of [id, token, args, kwargs, due ms]). Raised when one of
# them changes in a way an older Celery side would misread.
WIRE_PROTOCOL = 1
ANNOUNCE_EVERY_SECONDS = 30.0  # how often a running Celery worker says it is there
FRESH_MS = 120_000  # an announcement older than this is no longer relied on
FORGET_MS = 7 * 24 * 3600 * 1000  # announcements this old are removed


@dataclass(frozen=True)
class CelerySide:
    """One Celery worker's announcement of delayqueue's Celery side."""

    hostname: str
    protocol: int
    pid: int | None
    at_ms: int  # when it last said so (its clock, epoch ms)
    broker: str | None = None  # its broker, as kombu shows it (no password)
    queues: tuple[str, ...] = ()  # the Celery queues it consumes

    def consumes(self, broker: str | None, queue: str | None) -> bool:
        """Whether messages published to ``queue`` on ``broker`` reach this worker (as far
        as it said: an announcement without either is taken to cover it)."""
        same_broker = broker is None or self.broker is None or self.broker == broker
        return same_broker and (queue is None or not self.queues or queue in self.queues)


Form = Literal["single", "plain"]
# "single": one job to a message (never run_batch); "plain": a plain Celery task's job as the
# task's own message, acked when published (never run_task: no Celery worker runs it).
FORMS: tuple[Form, ...] = ("single", "plain")
FALLBACK_TTL_SECONDS = 3600  # the usual forms are tried again this long after the last fallback


@dataclass(frozen=True)
class Fallback:
    form: Form
    reason: str


@dataclass(frozen=True)
class Handoff:
    """What the delay worker may send: the Celery sides heard from, and the tasks whose jobs
    go in a simpler form (task name -> the form and why)."""

    sides: list[CelerySide] = field(default_factory=list)
    fallbacks: dict[str, Fallback] = field(default_factory=dict)
    read_ms: int = 0  # when this was read (this host's clock, epoch ms)

    def fresh_sides(self) -> list[CelerySide]:
        return [side for side in self.sides if self.read_ms - side.at_ms <= FRESH_MS]

    def celery_side_known(self, broker: str | None = None, queue: str | None = None) -> bool:
        """Whether a Celery worker that runs this delayqueue's messages and consumes ``queue``
        on ``broker`` said so recently: then run_batch and run_task are registered where
        those messages are consumed."""
        return any(
            side.protocol == WIRE_PROTOCOL and side.consumes(broker, queue)
            for side in self.fresh_sides()
        )

    @property
    def other_protocols(self) -> list[CelerySide]:
        """Recent Celery sides that speak another wire protocol (another delayqueue version):
        they may misread a batch."""
        return [side for side in self.fresh_sides() if side.protocol != WIRE_PROTOCOL]

    def may_batch(self, task: str) -> bool:
        return task not in self.fallbacks and not self.other_protocols

    def may_run_task(self, task: str) -> bool:
        """Whether a plain task's jobs go through delayqueue.run_task (with retries and dead
        letters), not as the task's own message acked at publish."""
        fallback = self.fallbacks.get(task)
        return fallback is None or fallback.form != "plain"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def announce(
    hostname: str, pid: int, broker: str | None = None, queues: list[str] | None = None
) -> None:
    """Say that the Celery worker ``hostname`` runs delayqueue's messages (now), consuming
    ``queues`` on ``broker``."""
    record = json.dumps(
        {"protocol": WIRE_PROTOCOL, "pid": pid, "at": _now_ms(), "broker": broker,
         "queues": queues or []}
    )  # fmt: skip
    with redis_errors():
        get_redis().hset(global_keys().celery_sides, hostname, record)


def withdraw(hostname: str) -> None:
    """The Celery worker ``hostname`` is stopping."""
    with redis_errors():
        get_redis().hdel(global_keys().celery_sides, hostname)


def fall_back(task: str, form: Form, reason: str, by: str) -> bool:
    """Hand ``task``'s jobs to Celery in ``form`` from now on, for FALLBACK_TTL_SECONDS after
    the last fallback; whether this is news (a simpler form than the one noted, or none)."""
    g = global_keys()
    record = json.dumps({"form": form, "reason": reason, "by": by, "at": _now_ms()})
    client = get_redis()
    with redis_errors():
        known = _fallback(client.hget(g.fallbacks, task))
        if known is not None and FORMS.index(known.form) >= FORMS.index(form):
            return False
        pipe = client.pipeline(transaction=False)
        pipe.hset(g.fallbacks, task, record)
        pipe.expire(g.fallbacks, FALLBACK_TTL_SECONDS)
        pipe.execute()
    return True


def forget_fallbacks(task: str | None = None) -> int:
    """Hand ``task``'s jobs (or every task's, with None) in the usual forms again."""
    g = global_keys()
    with redis_errors():
        if task is None:
            return int(get_redis().delete(g.fallbacks))
        return int(get_redis().hdel(g.fallbacks, task))


def read_handoff() -> Handoff:
    """The Celery sides heard from and the tasks' fallbacks, in one round trip. Entries that
    are not what ``announce`` and ``fall_back`` write are skipped (and those of sides silent
    for a week removed)."""
    g = global_keys()
    client = get_raw_redis()  # (bytes: one entry that is not UTF-8 is skipped, not the rest)
    with redis_errors():
        pipe = client.pipeline(transaction=False)
        pipe.hgetall(g.celery_sides)
        pipe.hgetall(g.fallbacks)
        sides_raw, fallbacks_raw = pipe.execute(raise_on_error=False)
    now = _now_ms()
    sides: list[CelerySide] = []
    gone: list[str] = []
    for hostname, raw in _mapping(sides_raw).items():
        record = _record(raw)
        at, protocol = record.get("at"), record.get("protocol")
        if not (isinstance(at, int) and isinstance(protocol, int)):
            continue
        if now - at > FORGET_MS:
            gone.append(hostname)
            continue
        pid, broker, queues = record.get("pid"), record.get("broker"), record.get("queues")
        sides.append(
            CelerySide(
                hostname,
                protocol,
                pid if _is_int(pid) else None,
                at,
                broker if isinstance(broker, str) else None,
                tuple(q for q in queues if isinstance(q, str)) if isinstance(queues, list) else (),
            )
        )
    if gone:
        with redis_errors():
            client.hdel(g.celery_sides, *gone)
    fallbacks = {}
    for task, raw in _mapping(fallbacks_raw).items():
        fallback = _fallback(raw)
        if fallback is not None:
            fallbacks[task] = fallback
    return Handoff(sorted(sides, key=lambda side: side.hostname), fallbacks, now)


def _fallback(raw: Any) -> Fallback | None:
    record = _record(raw)
    form, reason = record.get("form"), record.get("reason")
    if form not in FORMS:
        return None
    return Fallback(form, reason if isinstance(reason, str) else "(no reason recorded)")


def _mapping(reply: Any) -> dict[str, Any]:
    """A hash's fields (as text) and values, or nothing where the key is of another type;
    a field that is not UTF-8 is skipped."""
    if not isinstance(reply, dict):
        return {}
    fields = {}
    for name, value in reply.items():
        try:
            fields[name.decode() if isinstance(name, bytes) else str(name)] = value
        except UnicodeDecodeError:
            continue
    return fields


def _record(raw: Any) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def dispatches_begun(dispatches: list[tuple[str, str, str]]) -> list[bool | None]:
    """For each (queue, job id, token): True when that dispatch has begun on the Celery side,
    False while it is still in flight unbegun, None when the job has moved on (acked,
    failed, reaped, cancelled or dispatched again). One round trip."""
    if not dispatches:
        return []
    client = get_raw_redis()
    with redis_errors():
        pipe = client.pipeline(transaction=False)
        for queue, job_id, _ in dispatches:
            pipe.hmget(queue_keys(queue).job(job_id), "tok", "began")
        replies = pipe.execute(raise_on_error=False)
    states: list[bool | None] = []
    for (_, _, token), reply in zip(dispatches, replies, strict=True):
        if not isinstance(reply, list) or reply[0] != token.encode():
            states.append(None)
        else:
            states.append(reply[1] == reply[0])
    return states
