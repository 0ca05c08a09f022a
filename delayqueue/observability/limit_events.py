"""The events of deployment-wide limits (docs/limits.md): jobs a limit kept scheduled, and
jobs that expired before they could start. Each is a log line, a signal and (through the
signals) a metric, as every transition's events are (``events``)."""

from __future__ import annotations

from logging import INFO, WARNING

from delayqueue import signals
from delayqueue.observability import events
from delayqueue.observability.emit import log, logger, send

EXPIRED_REASON = "expired"  # the dead reason of a job that expired (claim.lua, fail.lua)


def expired(sender: str, queue: str, job_id: str, task: str | None = None) -> None:
    """Job ``job_id`` expired before it started: it is dead with the reason "expired"."""
    if logger.isEnabledFor(WARNING):
        log(
            WARNING,
            "job %s on %s expired before it could start: moved to dead, not run",
            (job_id, queue),
            "expired",
            queue,
            job_id,
            task,
        )
    if signals.job_expired.receivers:
        send(signals.job_expired, sender, queue=queue, job_id=job_id, task=task)
    events.dead(sender, queue, job_id, EXPIRED_REASON, EXPIRED_REASON, task)


def limited(queue: str, count: int) -> None:
    """A claim on ``queue`` kept ``count`` due jobs scheduled for their limits."""
    if not count:
        return
    if logger.isEnabledFor(INFO):
        log(
            INFO,
            "queue %s: %s due jobs wait for their rate or concurrency limit",
            (queue, count),
            "limited",
            queue,
            None,
            count=count,
        )
    if signals.job_limited.receivers:
        send(signals.job_limited, signals.SENDER_DELAY_WORKER, queue=queue, count=count)


def started_over_rate(queue: str, job_id: str, due_ms: int) -> None:
    """Job ``job_id`` reached the Celery side when its rate allowed no more starts (begin.lua
    counts the rate at the start): not run, scheduled again for ``due_ms``."""
    if logger.isEnabledFor(INFO):
        log(
            INFO,
            "job %s on %s over its rate at its start: not run, due again at %s ms",
            (job_id, queue, due_ms),
            "limited",
            queue,
            job_id,
        )
    if signals.job_limited.receivers:
        send(signals.job_limited, signals.SENDER_CELERY_WORKER, queue=queue, count=1)


def claimed(queue: str, expired_ids: list[str], held: int) -> None:
    """What one claim on ``queue`` did for limits: jobs it found expired, jobs it held."""
    if not (expired_ids or held):
        return
    for job_id in expired_ids:
        expired(signals.SENDER_DELAY_WORKER, queue, job_id)
    limited(queue, held)
