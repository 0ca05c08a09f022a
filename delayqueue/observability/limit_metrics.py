"""Prometheus counters of deployment-wide limits (docs/limits.md): due jobs a limit kept
scheduled, and jobs that expired before they started. Connected when
``delayqueue.observability.metrics`` is imported, as its own counters are."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter

from delayqueue import signals

LIMITED = Counter(
    "delayqueue_jobs_limited",
    "Due jobs a rate or concurrency limit kept scheduled (counted per claim that kept them)",
    ["queue"],
)
EXPIRED = Counter(
    "delayqueue_jobs_expired", "Jobs that expired before they could start (dead)", ["queue"]
)


def _on_limited(*, queue: str, count: int, **_: Any) -> None:
    LIMITED.labels(queue).inc(count)


def _on_expired(*, queue: str, **_: Any) -> None:
    EXPIRED.labels(queue).inc()


signals.job_limited.connect(
    _on_limited, weak=False, dispatch_uid="delayqueue.observability.limit_metrics.limited"
)
signals.job_expired.connect(
    _on_expired, weak=False, dispatch_uid="delayqueue.observability.limit_metrics.expired"
)
