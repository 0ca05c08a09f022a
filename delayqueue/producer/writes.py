"""Writing jobs: one on the direct connection, many in one round trip per queue and
``CHUNK`` jobs; inside ``atomic()``, all the jobs of a transaction in one write when it
commits (``on_commit``), and never on rollback."""

from __future__ import annotations

import asyncio
import threading
from datetime import UTC, datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine import transitions
from delayqueue.engine.clients import remember_queue
from delayqueue.engine.execution import run_all_direct, run_direct
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.plain_enqueue import PlainWritten
from delayqueue.observability import events, reported
from delayqueue.producer.due import Mode
from delayqueue.producer.job_spec import Job, JobSpec
from delayqueue.signals import SENDER_CLIENT


def apply_reply(job: Job, reply: transitions.Enqueued) -> None:
    job.id = reply.id
    job.due_at = datetime.fromtimestamp(reply.due_ms / 1000, tz=UTC)
    job.outcome = reply.outcome  # type: ignore[assignment]
    job.state = reply.state  # type: ignore[assignment]


CHUNK = 500  # jobs per enqueue call (one round trip)


def durable_of(specs: list[JobSpec]) -> bool | None:
    """One write's durability: waits when any of its jobs asks to; None leaves it to the
    DURABLE setting."""
    wanted = {s.durable for s in specs}
    if True in wanted:
        return True
    return False if wanted == {False} else None


def write(specs: list[JobSpec], each_level: int = events.DEBUG) -> None:
    """Write jobs: one on the direct connection, more in one round trip (on the direct
    connection too, unless they wait for replicas or Redis is a cluster:
    ``execution.run_all_direct``; their lines at ``each_level``, with one line per write
    when that is DEBUG). Durable ones wait for replicas in the same round trip
    (engine/execution.py)."""
    if len(specs) == 1:  # the latency path: delay_for() in a request
        remember_queue(specs[0].job.queue)
        call: transitions.ScriptCall[Any] = chunk_call(specs, events.INFO)  # (either layout)
        chunk_written(specs, run_direct(call, durable=specs[0].durable))
        return
    for queue in {s.job.queue for s in specs}:
        remember_queue(queue)
    chunks = chunked(specs)
    calls = [chunk_call(chunk, each_level) for chunk in chunks]
    written(chunks, run_all_direct(calls, durable=durable_of(specs)))


def chunked(specs: list[JobSpec]) -> list[list[JobSpec]]:
    """The jobs of a write, one enqueue call per queue and CHUNK jobs."""
    by_queue: dict[str, list[JobSpec]] = {}
    queue: str | None = None
    group: list[JobSpec] = []
    for s in specs:
        if s.job.queue != queue:  # (a batch's jobs mostly share their queue)
            queue = s.job.queue
            group = by_queue.setdefault(queue, [])
        group.append(s)
    return [
        group[start : start + CHUNK]
        for group in by_queue.values()
        for start in range(0, len(group), CHUNK)
    ]


def written(
    chunks: list[list[JobSpec]], replies: list[list[transitions.Enqueued] | PlainWritten]
) -> None:
    """The jobs' handles once their enqueue calls replied (their events: ``enqueue_call``)."""
    for chunk, reply in zip(chunks, replies, strict=True):
        chunk_written(chunk, reply)


def chunk_written(chunk: list[JobSpec], reply: list[transitions.Enqueued] | PlainWritten) -> None:
    """The handles of one chunk's jobs once its enqueue call replied."""
    if isinstance(reply, PlainWritten):
        if reply.now_ms is not None:
            all_created(chunk, reply)
            return
        reply = reply.replies or []
    for s, one in zip(chunk, reply, strict=True):
        apply_reply(s.job, one)


def all_created(chunk: list[JobSpec], reply: PlainWritten) -> None:
    """The handles of a plain chunk whose jobs were all written as new: each is scheduled at
    its due time (one datetime per run of jobs due at the same ms: a batch's mostly share
    it)."""
    now, last, at = reply.now_ms or 0, None, None
    for s in chunk:
        due = s.ms + now if s.mode == "delay" else s.ms  # (PlainWritten.due_ms)
        if due != last:
            last, at = due, datetime.fromtimestamp(due / 1000, tz=UTC)
        job = s.job
        job.due_at, job.outcome, job.state = at, "created", "scheduled"


def plain_mode(chunk: list[JobSpec]) -> Mode | None:
    """The one mode ("delay" or "at") of a chunk of plain jobs (no dedupe key, no limits or
    expiry), which enqueue.lua's plain layout takes; None when some job is not plain."""
    mode = chunk[0].mode
    for s in chunk:
        if s.job.key or s.limits or s.mode != mode:
            return None
    return mode


def chunk_call(
    chunk: list[JobSpec], level: int = events.DEBUG
) -> transitions.ScriptCall[list[transitions.Enqueued]] | transitions.ScriptCall[PlainWritten]:
    """``enqueue_call`` for one chunk of a write: plain jobs of one mode in enqueue.lua's
    plain layout (engine/plain_enqueue.py), with the same events."""
    mode = plain_mode(chunk)
    if mode is None:
        return enqueue_call(chunk, level)
    return reported.enqueue_plain(
        SENDER_CLIENT,
        queue_keys(chunk[0].job.queue),
        mode,
        chunk,
        wake_horizon_ms=WAKE_HORIZON_MS,
        level=level,
    )


def enqueue_call(
    chunk: list[JobSpec], level: int = events.INFO
) -> transitions.ScriptCall[list[transitions.Enqueued]]:
    """The jobs of one queue -> scheduled, reporting ``job_scheduled`` per job at ``level``
    (DEBUG: each job of a delay_many, summed up in one INFO line)."""
    new = [
        transitions.NewJob(
            s.job.id, s.mode, s.ms, s.job.key or "", s.on_conflict, s.packed, s.limits
        )
        for s in chunk
    ]
    return reported.enqueue(
        SENDER_CLIENT,
        queue_keys(chunk[0].job.queue),
        new,
        chunk,
        wake_horizon_ms=WAKE_HORIZON_MS,
        level=level,
    )


def submit(specs: list[JobSpec], on_commit: bool, using: str | None) -> None:
    # Outside atomic() there is nothing to wait for (and no need to touch the database).
    if on_commit and in_atomic_block(using):
        defer(specs, using)
        return
    write(specs)


def defer(specs: list[JobSpec], using: str | None) -> None:
    """Add the jobs to the pending write of the transaction this thread is in."""
    at_commit(transaction.get_connection(using), using).specs += specs


def in_atomic_block(using: str | None) -> bool:
    """Whether this thread is inside ``atomic()`` on database ``using``: Django's own flag.
    In a thread without an event loop, read off the connection Django keeps for the thread
    (asgiref's thread-critical Local stores it in a plain ``threading.local``); Django's
    look-up learns that there is no event loop by raising and catching an exception on
    every ``delay_for``. A thread that has no connection yet, an event loop, or another
    asgiref takes Django's look-up (which also refuses an unknown ``using``)."""
    if asyncio._get_running_loop() is None:
        local = getattr(connections, "_connections", None)  # (vars: no Local.__getattr__)
        storage = getattr(local, "__dict__", {}).get("_storage")
        if isinstance(storage, threading.local):
            connection = getattr(storage, using or DEFAULT_DB_ALIAS, None)
            if connection is not None:
                return bool(connection.in_atomic_block)
    return bool(transaction.get_connection(using).in_atomic_block)


class AtCommit:
    """The jobs one transaction schedules one after another, written in one round trip when
    it commits (``delay_for`` called ten times in a view: one write, not ten)."""

    def __init__(self) -> None:
        self.specs: list[JobSpec] = []

    def __call__(self) -> None:
        write(self.specs, events.INFO)


def at_commit(connection: Any, using: str | None) -> AtCommit:
    """The pending write of the transaction's last on_commit callback when it is ours and
    was registered under the same savepoints (so a savepoint rollback discards its jobs
    with the savepoint's, and no callback of the caller's moves before or after a job);
    else a new one."""
    hooks = getattr(connection, "run_on_commit", None)  # [(savepoint ids, callback, robust)]
    if hooks:
        savepoints, callback = hooks[-1][0], hooks[-1][1]
        if isinstance(callback, AtCommit) and savepoints == set(connection.savepoint_ids):
            return callback
    pending = AtCommit()
    transaction.on_commit(pending, using=using)
    return pending
