"""Prometheus counters of what operators do (the admin's and the command line's actions):
in-flight jobs forced back, dead jobs purged, queues and schedules paused and resumed.
Connected when ``delayqueue.observability.metrics`` is imported, as its own counters are."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter

from delayqueue import signals

FORCED_BACK = Counter(
    "delayqueue_jobs_forced_back", "In-flight jobs an operator forced back to scheduled", ["queue"]
)
PURGED = Counter("delayqueue_dead_purged", "Dead jobs an operator deleted", ["queue"])
PAUSES = Counter("delayqueue_queue_pauses", "Times an operator paused the queue", ["queue"])
RESUMES = Counter("delayqueue_queue_resumes", "Times an operator resumed the queue", ["queue"])
SCHEDULE_PAUSES = Counter(
    "delayqueue_schedule_pauses", "Times an operator paused the schedule", ["queue", "schedule"]
)
SCHEDULE_RESUMES = Counter(
    "delayqueue_schedule_resumes", "Times an operator resumed the schedule", ["queue", "schedule"]
)


def _on_forced_back(*, queue: str, **_: Any) -> None:
    FORCED_BACK.labels(queue).inc()


def _on_purged(*, queue: str, count: int, **_: Any) -> None:
    PURGED.labels(queue).inc(count)


def _on_paused(*, queue: str, **_: Any) -> None:
    PAUSES.labels(queue).inc()


def _on_resumed(*, queue: str, **_: Any) -> None:
    RESUMES.labels(queue).inc()


def _on_schedule_paused(*, queue: str, schedule: str, **_: Any) -> None:
    SCHEDULE_PAUSES.labels(queue, schedule).inc()


def _on_schedule_resumed(*, queue: str, schedule: str, **_: Any) -> None:
    SCHEDULE_RESUMES.labels(queue, schedule).inc()


for _signal, _receiver in (
    (signals.job_forced_back, _on_forced_back),
    (signals.dead_purged, _on_purged),
    (signals.queue_paused, _on_paused),
    (signals.queue_resumed, _on_resumed),
    (signals.schedule_paused, _on_schedule_paused),
    (signals.schedule_resumed, _on_schedule_resumed),
):
    _signal.connect(
        _receiver,
        weak=False,
        dispatch_uid=f"delayqueue.observability.operator_metrics.{_receiver.__name__}",
    )
