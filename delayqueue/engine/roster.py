"""The registries beside the queues: the queue names (``dq:queues``) and the delay workers
(``dq:workers``, a sorted set of ids by last heartbeat, and one expiring hash per worker).

Every reader (the delay worker, the admin, the command line, metrics) reads them here, with
one rule for what counts as a queue name and one shape for a worker's entry.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from delayqueue.engine.clients import get_raw_redis, get_redis, redis_now_ms
from delayqueue.engine.decode import integer, text, text_fields
from delayqueue.engine.keys import QUEUE_NAME, WorkerField, global_keys
from delayqueue.engine.reads import Reads
from delayqueue.engine.redis_errors import redis_errors

HEARTBEAT_TTL_SECONDS = 30  # a worker's hash expires this long after its last heartbeat
HEARTBEAT_TTL_MS = HEARTBEAT_TTL_SECONDS * 1000
FORGET_AFTER_MS = 10 * HEARTBEAT_TTL_MS  # a worker gone this long leaves the sorted set


# ---- queues -----------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueNames:
    """The registry's queue names (valid, sorted), and its entries that are not one, each
    with why (``(repr of the entry, "not UTF-8" | "not a valid queue name")``)."""

    names: list[str]
    ignored: list[tuple[str, str]]


def split_queue_names(members: Iterable[bytes | str]) -> QueueNames:
    """The one rule: a UTF-8 member that is a valid queue name (or a shard's) is a queue."""
    names: set[str] = set()
    ignored: list[tuple[str, str]] = []
    for member in members:
        if isinstance(member, bytes):
            try:
                name = member.decode()
            except UnicodeDecodeError:
                ignored.append((repr(member), "not UTF-8"))
                continue
        else:
            name = member
        if QUEUE_NAME.fullmatch(name):
            names.add(name)
        else:
            ignored.append((repr(name), "not a valid queue name"))
    return QueueNames(sorted(names), sorted(ignored))


def queue_names(notes: list[str] | None = None) -> QueueNames:
    """The queue registry. A registry of the wrong type reads as empty, with a note."""
    with redis_errors():
        reads = Reads(get_raw_redis(), [] if notes is None else notes)
        reads.add("smembers", global_keys().queues, default=set())
        (members,) = reads.run()
    return split_queue_names(members)


def is_registered(queue: str) -> bool:
    """Whether ``queue`` is in the registry (False when the registry is of the wrong type)."""
    with redis_errors():
        reads = Reads(get_raw_redis(), [])
        reads.add("sismember", global_keys().queues, queue, default=0)
        return bool(reads.run()[0])


# ---- delay workers ----------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerRecord:
    """One entry of the worker registry, read once: its id and last heartbeat in the sorted
    set, and what its hash holds (``gone`` once the hash expired: the worker is gone). Text
    that is not UTF-8 has its bytes escaped; a number that is not one is None."""

    id: str
    listed_ms: float
    gone: bool
    host: str = ""
    pid: str = ""
    queues: str = ""  # the queues it serves, comma-separated as stored
    dispatched: int | None = None  # jobs handed to Celery since it started
    beat_ms: int | None = None  # its last heartbeat, ms by Redis's clock


def _worker_record(worker_id: bytes, listed_ms: float, stored: Any) -> WorkerRecord:
    fields = text_fields(stored)
    return WorkerRecord(
        id=text(worker_id),
        listed_ms=listed_ms,
        gone=not fields,
        host=fields.get(WorkerField.HOST, ""),
        pid=fields.get(WorkerField.PID, ""),
        queues=fields.get(WorkerField.QUEUES, ""),
        dispatched=integer(fields.get(WorkerField.DISPATCHED)),
        beat_ms=integer(fields.get(WorkerField.BEAT)),
    )


def record_heartbeat(worker_id: str, queues: Iterable[str], dispatched: int) -> None:
    """This process's heartbeat as delay worker ``worker_id``: its hash (host, pid, queues,
    jobs dispatched, the beat's time by Redis's clock, so a host clock minutes off does not
    make live workers look dead) and its place in the sorted set; workers gone long ago are
    forgotten."""
    g = global_keys()
    with redis_errors():
        client = get_redis()
        now_ms = redis_now_ms(client)
        pipe = client.pipeline(transaction=False)
        pipe.hset(
            g.worker(worker_id),
            mapping={
                WorkerField.HOST: socket.gethostname(),
                WorkerField.PID: os.getpid(),
                WorkerField.QUEUES: ",".join(queues),
                WorkerField.DISPATCHED: dispatched,
                WorkerField.BEAT: now_ms,
            },
        )
        pipe.expire(g.worker(worker_id), HEARTBEAT_TTL_SECONDS)
        pipe.zadd(g.workers, {worker_id: now_ms})
        pipe.zremrangebyscore(g.workers, "-inf", now_ms - FORGET_AFTER_MS)
        pipe.execute()


def remove_worker(worker_id: str) -> None:
    """A delay worker's goodbye: its entry removed at once."""
    g = global_keys()
    with redis_errors():
        pipe = get_redis().pipeline(transaction=False)
        pipe.delete(g.worker(worker_id))
        pipe.zrem(g.workers, worker_id)
        pipe.execute()


def worker_entries(limit: int, notes: list[str] | None = None) -> list[WorkerRecord]:
    """The ``limit`` most recent entries, newest heartbeat first, each with its hash."""
    g = global_keys()
    notes = [] if notes is None else notes
    with redis_errors():
        client = get_raw_redis()
        reads = Reads(client, notes)
        reads.add("zrevrange", g.workers, 0, limit - 1, withscores=True, default=[])
        listed: list[tuple[bytes, float]] = reads.run()[0]
        reads = Reads(client, notes)
        for worker_id, _ in listed:
            reads.add("hgetall", g.worker("").encode() + worker_id, default={})
        hashes = reads.run()
    return [
        _worker_record(worker_id, score, stored)
        for (worker_id, score), stored in zip(listed, hashes, strict=True)
    ]


def live_workers(now_ms: int, limit: int = 1000) -> int:
    """How many delay workers had a heartbeat within ``HEARTBEAT_TTL_MS`` of ``now_ms``."""
    with redis_errors():
        reads = Reads(get_raw_redis(), [])
        reads.add("zrange", global_keys().workers, -limit, -1, withscores=True, default=[])
        listed: list[tuple[bytes, float]] = reads.run()[0]
    return sum(1 for _, beat in listed if beat >= now_ms - HEARTBEAT_TTL_MS)
