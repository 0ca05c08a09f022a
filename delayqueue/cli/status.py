"""Read-only views for the command line: a snapshot of every queue and live worker, the
health verdict drawn from it, and where a job id is. Built on the api's read queries; the few
reads the api lacks (which queue and state holds a job id) are plain pipelined reads here.
Nothing in this module writes to Redis."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from delayqueue.engine import presence, record
from delayqueue.engine.keys import check_queue_name
from delayqueue.services import browse, dashboard
from delayqueue.services.display import Moment

DEFAULT_MAX_OVERDUE = 60.0  # seconds the oldest due job may wait before health fails


@dataclass
class QueueStatus:
    name: str
    scheduled: int
    inflight: int
    dead: int
    paused: bool
    next_due: Moment | None
    overdue_seconds: float  # how long the oldest due job has waited; 0 when none is due
    last_minute: dashboard.Throughput  # per minute
    last_hour: dashboard.Throughput  # the average minute of the last hour
    workers: list[str]  # ids of the live workers that serve the queue


@dataclass
class WorkerStatus:
    id: str
    host: str
    pid: int | None
    queues: list[str]
    dispatched: int
    beat_age_seconds: float


@dataclass
class Snapshot:
    now_ms: int
    queues: list[QueueStatus]
    workers: list[WorkerStatus]
    notes: list[str] = field(default_factory=list)  # keys of the wrong type, read as empty
    # the Celery workers that announced delayqueue's side, and the tasks' hand-off fallbacks
    handoff: presence.Handoff = field(default_factory=presence.Handoff)


def check_queues(names: list[str] | None) -> list[str] | None:
    """The queue names given on the command line, checked (InvalidQueueName)."""
    return None if names is None else [check_queue_name(n) for n in names]


def snapshot(only: list[str] | None = None) -> Snapshot:
    """Every known queue (or ``only`` those) and every live worker, as Redis holds them now."""
    notes: list[str] = []
    queues = browse.known_queues(notes) if only is None else list(dict.fromkeys(only))
    now, overviews = dashboard.overview(queues, notes)
    live, _gone = dashboard.workers(notes)
    workers = [
        WorkerStatus(
            id=w.id,
            host=w.host,
            pid=int(w.pid) if w.pid.isdigit() else None,
            queues=w.queues,
            dispatched=w.dispatched,
            beat_age_seconds=_age(w.beat),
        )
        for w in live
    ]
    handoff = presence.read_handoff()
    result = []
    for o in overviews:
        overdue = o.oldest_overdue
        result.append(
            QueueStatus(
                name=o.name,
                scheduled=o.scheduled,
                inflight=o.inflight,
                dead=o.dead,
                paused=o.paused,
                next_due=o.next_due,
                overdue_seconds=_age(overdue) if overdue is not None else 0.0,
                last_minute=o.last_minute.per_minute(1),
                last_hour=o.last_hour.per_minute(60),
                workers=[w.id for w in workers if o.name in w.queues],
            )
        )
    return Snapshot(now, result, workers, notes, handoff)


def _age(moment: Moment) -> float:
    """Seconds from ``moment`` to now (0 for a time ahead; huge for a corrupt score)."""
    age = (moment.now_ms - moment.ms) / 1000
    return max(0.0, age) if math.isfinite(age) else math.inf


def epoch_iso(ms: float) -> str | None:
    """An epoch-ms time as ISO 8601 UTC; None when it is no time a datetime can hold."""
    try:
        return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)).isoformat(
            timespec="milliseconds"
        )
    except (OverflowError, ValueError):
        return None


# ---- health -----------------------------------------------------------------------------


@dataclass
class QueueHealth:
    name: str
    problems: list[str]
    remarks: list[str]  # said, but not a failure (paused, idle without a worker)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class Health:
    queues: list[QueueHealth]
    problems: list[str]  # not about one queue (no live worker at all)
    max_overdue: float
    # said, not a failure: tasks handed to Celery in a simpler form (and why), Celery sides
    remarks: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(q.ok for q in self.queues)


def health(snap: Snapshot, max_overdue: float = DEFAULT_MAX_OVERDUE) -> Health:
    """Unhealthy: no live delay worker at all; a queue holding scheduled or in-flight jobs
    that no live worker serves; a queue not paused whose oldest due job has waited longer than
    ``max_overdue`` seconds. A paused queue's due jobs wait on purpose and an idle queue needs
    no worker: both are only remarked on."""
    problems = [] if snap.workers else ["no live delay worker (start manage.py run_delay_worker)"]
    verdicts = []
    for q in snap.queues:
        verdict = QueueHealth(q.name, [], [])
        if not q.workers:
            if q.scheduled or q.inflight:
                verdict.problems.append(
                    f"no live delay worker serves it ({q.scheduled} scheduled, "
                    f"{q.inflight} in flight)"
                )
            else:
                verdict.remarks.append("no live delay worker serves it (idle)")
        if q.paused:
            verdict.remarks.append("paused")
        elif q.overdue_seconds > max_overdue:
            verdict.problems.append(
                f"oldest due job waiting {_seconds(q.overdue_seconds)} "
                f"(more than {_seconds(max_overdue)})"
            )
        verdicts.append(verdict)
    return Health(verdicts, problems, max_overdue, dashboard.handoff_remarks(snap.handoff))


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if math.isfinite(value) else "forever (the due time is corrupt)"


# ---- where a job is ---------------------------------------------------------------------


Place = record.Place


def locate(job_id: str, queues: list[str] | None = None) -> list[Place]:
    """The queues (every known one, or ``queues``) that hold ``job_id``, and in which state:
    one round trip (engine/record.py)."""
    notes: list[str] = []
    names = browse.known_queues(notes) if queues is None else queues
    return record.places_of(job_id, names, notes)
