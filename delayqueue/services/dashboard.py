"""Read-only queries on Redis for the admin dashboard: one row per queue (counts, heads,
throughput of the last minute and hour), the due-time chart buckets and the live workers.
Counts are ZCARD/ZCOUNT and the stats hashes of the last hour, pipelined; nothing loads a
queue. Job lists and single jobs are in browse.py and job_detail.py. Everything is read as
bytes; a key of the wrong type reads as empty and adds a note to ``notes``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from delayqueue.engine import presence, roster
from delayqueue.engine import queues as queue_state
from delayqueue.engine.keys import STAT_FIELDS
from delayqueue.engine.reads import redis_now
from delayqueue.engine.shards import logical, shard_index
from delayqueue.services.display import Moment, integer, text

MAX_WORKERS_SHOWN = 100
FIELD_CHARS = 200  # most characters of a worker's id or field shown
MINUTE_MS = 60_000
HOUR_MS = 3_600_000
STATS_MINUTES = 61  # the stats hashes read: this minute and the 60 before it
CHART_MINUTES, CHART_HOURS = 60, 24


@dataclass
class Throughput:
    """The four counters of the stats keys: counts over a window, or (``per_minute``) the
    average minute of it. The dashboard, the command line and the metrics read these."""

    dispatched: float = 0
    acked: float = 0
    failed: float = 0
    dead: float = 0

    def per_minute(self, minutes: int) -> Throughput:
        return Throughput(
            *(round(n / minutes, 2) for n in (self.dispatched, self.acked, self.failed, self.dead))
        )


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
    shards: list[QueueOverview] = field(default_factory=list)  # a sharded queue's, in order


def _window_sum(buckets: list[list[Any]], fraction_left: float, whole: int) -> Throughput:
    """Counters of a sliding window: the ``whole`` newest minute buckets plus the share of the
    next older one that still falls inside the window (the usual sliding-window estimate)."""
    totals = [0.0] * len(STAT_FIELDS)
    for index, values in enumerate(buckets[: whole + 1]):
        weight = 1.0 if index < whole else fraction_left
        for i, value in enumerate(values):
            totals[i] += weight * (integer(value) or 0)
    return Throughput(*(round(t) for t in totals))


def overview(queues: list[str], notes: list[str] | None = None) -> tuple[int, list[QueueOverview]]:
    """(Redis now ms, one overview per queue), in two round trips whatever the queue count."""
    now = redis_now()
    minute, into = divmod(now, MINUTE_MS)
    fraction_left = 1 - into / MINUTE_MS
    read = queue_state.counts_and_stats(
        queues, minute, STATS_MINUTES, [] if notes is None else notes
    )
    result = []
    for queue, (counts, buckets) in zip(queues, read, strict=True):
        head, deadline = counts.next_due_ms, counts.next_deadline_ms
        result.append(
            QueueOverview(
                name=queue,
                scheduled=counts.scheduled or 0,
                inflight=counts.inflight or 0,
                dead=counts.dead or 0,
                paused=bool(counts.paused),
                next_due=Moment(head, now) if head is not None else None,
                oldest_overdue=Moment(head, now) if head is not None and head <= now else None,
                next_deadline=Moment(deadline, now) if deadline is not None else None,
                last_minute=_window_sum(buckets, fraction_left, 1),
                last_hour=_window_sum(buckets, fraction_left, STATS_MINUTES - 1),
            )
        )
    return now, _by_queue(result)


def _by_queue(rows: list[QueueOverview]) -> list[QueueOverview]:
    """One row per queue: a sharded queue's shards (``orders~0``...) summed into a row of
    ``orders`` that holds them, in shard order, where its first shard stood."""
    grouped: dict[str, list[QueueOverview]] = {}
    for row in rows:
        grouped.setdefault(logical(row.name), []).append(row)
    result = []
    for name, members in grouped.items():
        if len(members) == 1 and members[0].name == name:
            result.append(members[0])
            continue
        # the queue's own row (jobs from before it was sharded, or scheduled as ``Q~N`` of
        # a queue without shards) first, then its shards in order
        members.sort(key=lambda row: -1 if (i := shard_index(row.name)) is None else i)
        result.append(
            QueueOverview(
                name=name,
                scheduled=sum(m.scheduled for m in members),
                inflight=sum(m.inflight for m in members),
                dead=sum(m.dead for m in members),
                paused=all(m.paused for m in members),
                next_due=_earliest(m.next_due for m in members),
                oldest_overdue=_earliest(m.oldest_overdue for m in members),
                next_deadline=_earliest(m.next_deadline for m in members),
                last_minute=_total(m.last_minute for m in members),
                last_hour=_total(m.last_hour for m in members),
                shards=members,
            )
        )
    return result


def _earliest(moments: Iterable[Moment | None]) -> Moment | None:
    present = [m for m in moments if m is not None]
    return min(present, key=lambda m: m.ms) if present else None


def _total(counts: Iterable[Throughput]) -> Throughput:
    rows = list(counts)
    return Throughput(*(sum(getattr(r, f) for r in rows) for f in STAT_FIELDS))


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
    now = redis_now()
    minute_starts = [now + i * MINUTE_MS for i in range(CHART_MINUTES)]
    hour_starts = [now + i * HOUR_MS for i in range(CHART_HOURS)]
    spans = [(float("-inf"), float(now))]
    spans += [(start, start + MINUTE_MS) for start in minute_starts]
    spans += [(start, start + HOUR_MS) for start in hour_starts]
    counted = queue_state.due_between(queues, spans, [] if notes is None else notes)
    by_minute = counted[1 : 1 + CHART_MINUTES]
    by_hour = counted[1 + CHART_MINUTES :]
    return DueChart(
        overdue=counted[0],
        minutes=[
            Bucket(Moment(start, now), n, f"+{i} min")
            for i, (start, n) in enumerate(zip(minute_starts, by_minute, strict=True))
        ],
        hours=[
            Bucket(Moment(start, now), n, f"+{i} h")
            for i, (start, n) in enumerate(zip(hour_starts, by_hour, strict=True))
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
    now = redis_now()
    alive, gone = [], 0
    for worker in roster.worker_entries(MAX_WORKERS_SHOWN, notes):
        if worker.gone:
            gone += 1
            continue
        beat = worker.beat_ms
        alive.append(
            WorkerInfo(
                id=text(worker.id, FIELD_CHARS),
                host=text(worker.host, FIELD_CHARS),
                pid=text(worker.pid, FIELD_CHARS),
                queues=[q for q in text(worker.queues, FIELD_CHARS).split(",") if q],
                dispatched=worker.dispatched or 0,
                beat=Moment(worker.listed_ms if beat is None else beat, now),
            )
        )
    return alive, gone


def handoff_remarks(handoff: presence.Handoff) -> list[str]:
    """What a delay worker says once in its log about the hand-off: the tasks whose jobs
    go in a simpler form and why, Celery workers of another wire protocol, and whether any
    Celery worker announced delayqueue's side."""
    remarks = [
        f"jobs of {task} are handed to Celery "
        + ("one to a message" if fallback.form == "single" else "as the task itself, acked when "
           "published (no retries, no dead letters)")
        + f": {fallback.reason}"
        for task, fallback in sorted(handoff.fallbacks.items())
    ]  # fmt: skip
    remarks += [
        f"Celery worker {side.hostname} runs wire protocol {side.protocol}, not "
        f"{presence.WIRE_PROTOCOL} (another delayqueue version): no batches are sent"
        for side in handoff.other_protocols
    ]
    sides = handoff.fresh_sides()
    if sides:
        names = ", ".join(
            f"{side.hostname} ({', '.join(side.queues) or 'its queues'} on {side.broker})"
            if side.broker
            else side.hostname
            for side in sides
        )
        remarks.append(f"Celery workers that run delayqueue's messages: {names}")
    else:
        remarks.append(
            "no Celery worker has announced delayqueue's side in the last 2 minutes (a Celery "
            "worker does when delayqueue's tasks are in its app)"
        )
    return remarks
