"""Prometheus metrics (docs/operations.md lists them).

- Counters and histograms are fed by receivers of ``delayqueue.signals``, in the process
  that made each transition: scheduled/cancelled/rescheduled in the processes that call the
  client API, dispatched/reaped/buried in the delay worker, started/succeeded/retried/dead
  and the run time in the Celery worker's processes.
- Gauges (scheduled, in flight, dead, oldest overdue, paused per queue; live delay workers)
  are read from Redis when scraped (``QueueCollector``), so every endpoint serves the same.

A process counts once this module is imported (its receivers are connected then): by the
URLconf that mounts ``metrics_view``, by ``run_delay_worker --metrics-port``, and in every
process that imports delayqueue when ``PROMETHEUS_MULTIPROC_DIR`` is set. A process that
serves no metrics sends its signals to no receiver and pays nothing. (A project exporting
the default registry some other way imports ``delayqueue.observability.metrics`` in a ``ready()``.)

Served by ``run_delay_worker --metrics-port PORT`` (that process's figures and the gauges)
and by ``metrics_view``, which a project mounts (``path("metrics/", metrics_view)``). With
``PROMETHEUS_MULTIPROC_DIR`` set (prometheus_client's multiprocess mode), the view serves
the sum of every process that writes into that directory: the Celery worker's prefork
children and the web server's workers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from typing import Any

from django.dispatch import Signal
from django.http import HttpRequest, HttpResponse
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from delayqueue import signals
from delayqueue.engine import queues as queue_state
from delayqueue.engine import roster
from delayqueue.engine.reads import redis_now
from delayqueue.errors import DelayQueueError

logger = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

LATENESS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip
RUN_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
)  # fmt: skip

# ---- counters and histograms (each process's own; summed across processes in multiprocess
# mode) ----------------------------------------------------------------------------------------

SCHEDULED = Counter(
    "delayqueue_jobs_scheduled",
    "Jobs written to scheduled by the client API (created, or replacing a job by its key)",
    ["queue"],
)
CANCELLED = Counter("delayqueue_jobs_cancelled", "Scheduled jobs cancelled", ["queue"])
RESCHEDULED = Counter(
    "delayqueue_jobs_rescheduled", "Scheduled jobs moved to a new due time", ["queue"]
)
DISPATCHED = Counter(
    "delayqueue_jobs_dispatched", "Claimed jobs published to the Celery broker", ["queue"]
)
STARTED = Counter("delayqueue_jobs_started", "Dispatches whose task started", ["queue"])
SUCCEEDED = Counter("delayqueue_jobs_succeeded", "Tasks that returned", ["queue"])
RETRIED = Counter(
    "delayqueue_jobs_retried", "Tasks that raised and were scheduled again", ["queue"]
)
DEAD = Counter(
    "delayqueue_jobs_dead",
    "Jobs moved to dead; cause: failed (attempts used up), buried (data that cannot run), "
    "reaped (timed out on their last attempt)",
    ["queue", "cause"],
)
REAPED = Counter(
    "delayqueue_jobs_reaped",
    "In-flight jobs past their visibility deadline (rescheduled or moved to dead)",
    ["queue"],
)
REQUEUED = Counter("delayqueue_jobs_requeued", "Dead jobs put back to scheduled", ["queue"])
RELEASED = Counter(
    "delayqueue_jobs_released",
    "In-flight jobs given back to scheduled without a failure (broker outage, fallback)",
    ["queue"],
)

DISPATCH_LATENESS = Histogram(
    "delayqueue_dispatch_lateness_seconds",
    "Due time -> published to the broker (Redis's clock); only jobs whose due time the "
    "delay worker learns",
    ["queue"],
    buckets=LATENESS_BUCKETS,
)
START_LATENESS = Histogram(
    "delayqueue_start_lateness_seconds",
    "Due time (Redis's clock) -> the task starts (the Celery host's clock); only messages "
    "that carry the due time",
    ["queue"],
    buckets=LATENESS_BUCKETS,
)
START_WAIT = Histogram(
    "delayqueue_start_wait_seconds",
    "Claimed by the delay worker (Redis's clock) -> the task starts (the Celery host's "
    "clock): the time a dispatch waits in the broker's queue",
    ["queue"],
    buckets=LATENESS_BUCKETS,
)
TICKS = Counter(
    "delayqueue_schedule_ticks",
    "Occurrences of periodic schedules that came due and were handed on (runs=false: "
    "missed=skip removed them unrun)",
    ["queue", "schedule", "runs"],
)
TICKS_MISSED = Counter(
    "delayqueue_schedule_ticks_missed",
    "Occurrences of periodic schedules that were not run (every delay worker was down)",
    ["queue", "schedule"],
)
TICK_LATENESS = Histogram(
    "delayqueue_schedule_tick_lateness_seconds",
    "An occurrence's instant -> the delay worker moved its schedule on (Redis's clock)",
    ["queue"],
    buckets=LATENESS_BUCKETS,
)
RUN_TIME = Histogram(
    "delayqueue_run_seconds",
    "Run time of a job's task, successful or not",
    ["queue", "task"],
    buckets=RUN_BUCKETS,
)


class _Children:
    """A metric's labelled children, kept at hand: ``labels()`` takes a lock and builds a
    key at every call, and a receiver runs once per job."""

    def __init__(self, metric: Counter | Histogram) -> None:
        self.metric = metric
        self.children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *labels: str) -> Any:
        try:
            return self.children[labels]
        except KeyError:
            child = self.children[labels] = self.metric.labels(*labels)
            return child


_scheduled, _cancelled, _rescheduled = (
    _Children(SCHEDULED),
    _Children(CANCELLED),
    _Children(RESCHEDULED),
)
_dispatched, _started, _succeeded, _retried = (
    _Children(DISPATCHED),
    _Children(STARTED),
    _Children(SUCCEEDED),
    _Children(RETRIED),
)
_dead, _reaped, _requeued = _Children(DEAD), _Children(REAPED), _Children(REQUEUED)
_released = _Children(RELEASED)
_dispatch_lateness, _start_lateness, _start_wait, _run_time = (
    _Children(DISPATCH_LATENESS),
    _Children(START_LATENESS),
    _Children(START_WAIT),
    _Children(RUN_TIME),
)


def _on_scheduled(*, queue: str, outcome: str, **_: Any) -> None:
    if outcome != "kept":
        _scheduled(queue).inc()


def _on_cancelled(*, queue: str, **_: Any) -> None:
    _cancelled(queue).inc()


def _on_rescheduled(*, queue: str, **_: Any) -> None:
    _rescheduled(queue).inc()


def _on_dispatched(*, queue: str, lateness_ms: int | None, **_: Any) -> None:
    _dispatched(queue).inc()
    if lateness_ms is not None:
        _dispatch_lateness(queue).observe(max(0, lateness_ms) / 1000)


def _on_started(*, queue: str, lateness_ms: int | None, wait_ms: int | None, **_: Any) -> None:
    _started(queue).inc()
    if lateness_ms is not None:
        _start_lateness(queue).observe(max(0, lateness_ms) / 1000)
    if wait_ms is not None:
        _start_wait(queue).observe(max(0, wait_ms) / 1000)


def _on_succeeded(*, queue: str, task: str, runtime: float, **_: Any) -> None:
    _succeeded(queue).inc()
    _run_time(queue, task).observe(runtime)


def _on_failed(*, queue: str, task: str, runtime: float, outcome: str | None, **_: Any) -> None:
    _run_time(queue, task).observe(runtime)
    if outcome == "retry":
        _retried(queue).inc()


def _on_dead(*, queue: str, cause: str, **_: Any) -> None:
    _dead(queue, cause).inc()


def _on_reaped(*, queue: str, rescheduled: int, dead: int, **_: Any) -> None:
    _reaped(queue).inc(rescheduled + dead)
    if dead:
        _dead(queue, "reaped").inc(dead)


def _on_requeued(*, queue: str, **_: Any) -> None:
    _requeued(queue).inc()


def _on_released(*, queue: str, **_: Any) -> None:
    _released(queue).inc()


def _on_ticked(
    *, queue: str, schedule: str, lateness_ms: int, runs: bool, missed: int, **_: Any
) -> None:
    TICKS.labels(queue, schedule, "true" if runs else "false").inc()
    if missed:
        TICKS_MISSED.labels(queue, schedule).inc(missed)
    TICK_LATENESS.labels(queue).observe(max(lateness_ms, 0) / 1000)


_RECEIVERS: dict[Signal, Callable[..., None]] = {
    signals.job_scheduled: _on_scheduled,
    signals.job_cancelled: _on_cancelled,
    signals.job_rescheduled: _on_rescheduled,
    signals.job_dispatched: _on_dispatched,
    signals.job_started: _on_started,
    signals.job_succeeded: _on_succeeded,
    signals.job_failed: _on_failed,
    signals.job_dead: _on_dead,
    signals.job_reaped: _on_reaped,
    signals.job_requeued: _on_requeued,
    signals.job_released: _on_released,
    signals.schedule_ticked: _on_ticked,
}
for _signal, _receiver in _RECEIVERS.items():
    _signal.connect(
        _receiver, weak=False, dispatch_uid=f"delayqueue.observability.metrics.{_receiver.__name__}"
    )


from delayqueue.observability import limit_metrics, operator_metrics  # noqa: E402, F401

# ---- gauges read from Redis at scrape time -------------------------------------------------


class QueueCollector(Collector):
    """Per queue of the registry (``dq:queues``): jobs scheduled, in flight and dead, how
    overdue the earliest scheduled job is, whether the queue is paused; the live delay
    workers; and ``delayqueue_redis_up`` (0 when Redis could not be read: the other gauges
    are then left out of the scrape). Read-only commands, one round trip per scrape."""

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "delayqueue_redis_up", "1 when the scrape could read delayqueue's figures from Redis"
        )
        try:
            families = self._read()
        except DelayQueueError as exc:
            logger.warning("metrics: cannot read the queues from Redis: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from families

    def _read(self) -> list[Metric]:
        now_ms = redis_now()  # not in a pipeline: a cluster's refuses TIME
        queues = roster.queue_names().names
        per_queue = queue_state.queue_counts(queues)
        live_workers = roster.live_workers(now_ms)

        def gauge(name: str, documentation: str) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, documentation, labels=["queue"])

        scheduled = gauge(
            "delayqueue_queue_scheduled", "Jobs scheduled (waiting for their due time)"
        )
        inflight = gauge("delayqueue_queue_inflight", "Jobs dispatched and not yet acked")
        dead = gauge("delayqueue_queue_dead", "Jobs in the dead set")
        overdue = gauge(
            "delayqueue_queue_oldest_overdue_seconds",
            "How long the earliest scheduled job is past its due time (0 when none is due)",
        )
        paused = gauge("delayqueue_queue_paused", "1 while the queue is paused")
        for each in per_queue:
            # A key of the wrong type (read as None) leaves that one figure out.
            for family, value in ((scheduled, each.scheduled), (inflight, each.inflight),
                                  (dead, each.dead), (paused, each.paused)):  # fmt: skip
                if value is not None:
                    family.add_metric([each.queue], int(value))
            if each.scheduled is not None:
                head = each.next_due_ms
                late_ms = now_ms - head if head is not None else 0.0
                if late_ms == late_ms:  # not nan
                    overdue.add_metric([each.queue], max(0.0, late_ms) / 1000)
        live = GaugeMetricFamily(
            "delayqueue_delay_workers", "Delay workers with a heartbeat in the last 30 s"
        )
        live.add_metric([], live_workers)
        return [scheduled, inflight, dead, overdue, paused, live]


# ---- serving ---------------------------------------------------------------------------------


class _ThisProcess(Collector):
    """The default registry of this process: delayqueue's counters and histograms, and
    whatever else the project registered there."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()


def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower()) or None


def registry(*, multiprocess: bool | None = None) -> CollectorRegistry:
    """What an endpoint serves: the gauges read from Redis, and the counters and histograms
    of this process, or of every process writing into ``PROMETHEUS_MULTIPROC_DIR`` when
    ``multiprocess`` (by default: when that directory is set)."""
    served = CollectorRegistry()
    path = multiprocess_dir()
    if multiprocess is None:
        multiprocess = path is not None
    if multiprocess:
        MultiProcessCollector(served, path)
    else:
        served.register(_ThisProcess())
    served.register(QueueCollector())
    return served


def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format; mount it in a project's URLconf (and keep it off the
    public internet: it names queues and tasks)."""
    return HttpResponse(generate_latest(registry()), content_type=CONTENT_TYPE_LATEST)
