"""Read-only queries on Redis for the admin dashboard: one row per queue (counts, heads,
throughput of the last minute and hour), the due-time chart buckets and the live workers.
Counts are ZCARD/ZCOUNT and the stats hashes of the last hour, pipelined; nothing loads a
queue. Job lists and single jobs are in browse.py and job_detail.py. Everything is read as
bytes; a key of the wrong type reads as empty and adds a note to ``notes``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delayqueue.api.browse import HOUR_MS, MINUTE_MS, redis_now
from delayqueue.api.display import Moment, Reads, integer, text
from delayqueue.engine.clients import get_raw_redis, global_keys, queue_keys, redis_errors

MAX_WORKERS_SHOWN = 100
FIELD_CHARS = 200  # most characters of a worker's id or field shown


@dataclass
class Throughput:
    dispatched: int = 0
    acked: int = 0
    failed: int = 0
    dead: int = 0


@dataclass
class QueueOverview:
    name: str
    scheduled: int
    inflight: int
    dead: int
    paused: bool
    next_due: Moment | None
    oldest_overdue: Moment | None
    next_deadline: Moment | None
    last_minute: Throughput
    last_hour: Throughput


_STAT_FIELDS = ("dispatched", "acked", "failed", "dead")


def _window_sum(buckets: list[list[Any]], fraction_left: float, whole: int) -> Throughput:
    """Counters of a sliding window: the ``whole`` newest minute buckets plus the share of the
    next older one that still falls inside the window (the usual sliding-window estimate)."""
    totals = [0.0] * len(_STAT_FIELDS)
    for index, values in enumerate(buckets[: whole + 1]):
        weight = 1.0 if index < whole else fraction_left
        for i, value in enumerate(values):
            totals[i] += weight * (integer(value) or 0)
    return Throughput(*(round(t) for t in totals))


def overview(queues: list[str], notes: list[str] | None = None) -> tuple[int, list[QueueOverview]]:
    """(Redis now ms, one overview per queue), in two round trips whatever the queue count."""
    with redis_errors():
        client = get_raw_redis()
        now = redis_now(client)
        minute, into = divmod(now, MINUTE_MS)
        fraction_left = 1 - into / MINUTE_MS
        reads = Reads(client, [] if notes is None else notes)
        for queue in queues:
            keys = queue_keys(queue)
            for zset in (keys.scheduled, keys.inflight, keys.dead):
                reads.add("zcard", zset, default=0)
            reads.add("exists", keys.paused, default=0)
            reads.add("zrange", keys.scheduled, 0, 0, withscores=True, default=[])
            reads.add("zrange", keys.inflight, 0, 0, withscores=True, default=[])
            for back in range(61):  # this minute and the 60 before it
                reads.add("hmget", keys.stats(minute - back), _STAT_FIELDS, default=[None] * 4)
        replies = reads.run()
    result = []
    per_queue = 6 + 61
    for index, queue in enumerate(queues):
        r = replies[index * per_queue : (index + 1) * per_queue]
        head = r[4][0][1] if r[4] else None
        deadline = r[5][0][1] if r[5] else None
        buckets = r[6:]
        result.append(
            QueueOverview(
                name=queue,
                scheduled=int(r[0]),
                inflight=int(r[1]),
                dead=int(r[2]),
                paused=bool(r[3]),
                next_due=Moment(head, now) if head is not None else None,
                oldest_overdue=Moment(head, now) if head is not None and head <= now else None,
                next_deadline=Moment(deadline, now) if deadline is not None else None,
                last_minute=_window_sum(buckets, fraction_left, 1),
                last_hour=_window_sum(buckets, fraction_left, 60),
            )
        )
    return now, result


# ---- the due-time chart -----------------------------------------------------------------


@dataclass
class Bucket:
    start: Moment
    count: int
    label: str


@dataclass
class DueChart:
    overdue: int
    minutes: list[Bucket]  # the next 60 minutes, one bucket each
    hours: list[Bucket]  # the next 24 hours, one bucket each


def due_chart(queues: list[str], notes: list[str] | None = None) -> DueChart:
    """How many scheduled jobs come due per minute over the next hour and per hour over the
    next day (ZCOUNT per bucket and queue, one pipeline)."""
    with redis_errors():
        client = get_raw_redis()
        now = redis_now(client)
        minute_starts = [now + i * MINUTE_MS for i in range(60)]
        hour_starts = [now + i * HOUR_MS for i in range(24)]
        reads = Reads(client, [] if notes is None else notes)
        for queue in queues:
            zset = queue_keys(queue).scheduled
            reads.add("zcount", zset, "-inf", f"({now}", default=0)
            for start in minute_starts:
                reads.add("zcount", zset, start, f"({start + MINUTE_MS}", default=0)
            for start in hour_starts:
                reads.add("zcount", zset, start, f"({start + HOUR_MS}", default=0)
        replies = reads.run()
    width = 1 + 60 + 24
    sums = [0] * width
    for index in range(len(queues)):
        for i, value in enumerate(replies[index * width : (index + 1) * width]):
            sums[i] += int(value)  # ZCOUNT: always an integer reply
    return DueChart(
        overdue=sums[0],
        minutes=[
            Bucket(Moment(s, now), c, f"+{i} min")
            for i, (s, c) in enumerate(zip(minute_starts, sums[1:61], strict=True))
        ],
        hours=[
            Bucket(Moment(s, now), c, f"+{i} h")
            for i, (s, c) in enumerate(zip(hour_starts, sums[61:], strict=True))
        ],
    )


# ---- workers ----------------------------------------------------------------------------


@dataclass
class WorkerInfo:
    id: str
    host: str
    pid: str
    queues: list[str]
    dispatched: int
    beat: Moment


def workers(notes: list[str] | None = None) -> tuple[list[WorkerInfo], int]:
    """(alive ``run_delay_worker`` processes, newest heartbeat first; count of entries whose
    heartbeat hash has expired). A worker's hash expires ~30 s after its last heartbeat."""
    g = global_keys()
    notes = [] if notes is None else notes
    with redis_errors():
        client = get_raw_redis()
        now = redis_now(client)
        reads = Reads(client, notes)
        reads.add("zrevrange", g.workers, 0, MAX_WORKERS_SHOWN - 1, withscores=True, default=[])
        entries: list[tuple[bytes, float]] = reads.run()[0]
        reads = Reads(client, notes)
        for worker_id, _ in entries:
            reads.add("hgetall", g.worker("").encode() + worker_id, default={})
        hashes = reads.run()
    alive, gone = [], 0
    for (worker_id, score), stored in zip(entries, hashes, strict=True):
        if not stored:
            gone += 1
            continue
        info = {text(name): text(value, FIELD_CHARS) for name, value in stored.items()}
        beat = integer(info.get("beat"))
        alive.append(
            WorkerInfo(
                id=text(worker_id, FIELD_CHARS),
                host=info.get("host", ""),
                pid=info.get("pid", ""),
                queues=[q for q in info.get("queues", "").split(",") if q],
                dispatched=integer(info.get("dispatched")) or 0,
                beat=Moment(score if beat is None else beat, now),
            )
        )
    return alive, gone
