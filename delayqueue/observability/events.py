"""What happens at each transition besides Redis: one log line (logger ``delayqueue.jobs``,
with the job's fields as ``extra`` for a JSON formatter) and one signal
(``delayqueue.signals``), which the Prometheus metrics
(``delayqueue.observability.metrics``) receive.

Each event is declared once (an ``Event``: its transition, signal, level, message and
extras) and said by ``emit.emit``; the functions below are what the transitions call
(through ``reported``: the call that runs a script reports its event). A log line is built
only when its level is enabled, a signal's arguments only when the signal has receivers, and
a receiver that raises is logged, never raised.

Every line carries the extras ``transition``, ``queue``, ``job_id``, ``task``, ``attempt``
and ``lateness_ms`` (None where unknown), plus the transition's own (``due_ms``,
``runtime_ms``, ``wait_ms``, ``outcome``, ``reason``, ``key``, ``rescheduled``, ``dead``,
``count``, ``note``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Protocol

from delayqueue.observability.catalog import (
    CANCELLED,
    DEAD,
    DEAD_PURGED,
    DISPATCHED,
    DISPATCHED_BATCH,
    FAILED,
    FORCED_BACK,
    HANDED_OVER,
    LOG_EACH_DISPATCH,
    QUEUE_PAUSED,
    QUEUE_RESUMED,
    REAPED,
    RELEASED,
    REQUEUED,
    RESCHEDULED,
    SCHEDULE_PAUSED,
    SCHEDULE_RESUMED,
    SCHEDULED,
    SCHEDULED_BATCH,
    STARTED,
    SUCCEEDED,
    TICKED,
)
from delayqueue.observability.emit import DEBUG, ERROR, INFO, WARNING, emit, logger
from delayqueue.signals import SENDER_CELERY_WORKER, SENDER_DELAY_WORKER

if os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir"):
    # Multiprocess mode: every process counts into the shared directory, which a metrics
    # view serves. Otherwise a process counts once it imports
    # delayqueue.observability.metrics (to serve it: the view, run_delay_worker
    # --metrics-port), and the others send to no receiver.
    import delayqueue.observability.metrics  # noqa: F401

__all__ = ["DEBUG", "ERROR", "INFO", "LOG_EACH_DISPATCH", "WARNING", "emit", "logger"]

# ---- what the transitions call -------------------------------------------------------------


def scheduled(
    sender: str,
    queue: str,
    job_id: str,
    task: str,
    due_ms: int,
    key: str | None,
    outcome: str,
    level: int = INFO,
) -> None:
    """One job written by the client; ``level`` DEBUG for the jobs of a batch (delay_many),
    which ``scheduled_batch`` sums up at INFO."""
    if SCHEDULED.wanted(level):
        emit(SCHEDULED, sender, level, queue=queue, job_id=job_id, task=task, due_ms=due_ms,
             key=key, outcome=outcome)  # fmt: skip


def scheduled_batch(queue: str, outcomes: dict[str, int]) -> None:
    """One line for the jobs of one batch write on ``queue``: outcome -> count."""
    if logger.isEnabledFor(INFO):
        detail = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        emit(SCHEDULED_BATCH, "", queue=queue, count=sum(outcomes.values()), detail=detail)


def cancelled(sender: str, queue: str, job_id: str, key: str | None) -> None:
    emit(CANCELLED, sender, queue=queue, job_id=job_id, key=key)


def rescheduled(sender: str, queue: str, job_id: str, due_ms: int, key: str | None) -> None:
    emit(RESCHEDULED, sender, queue=queue, job_id=job_id, due_ms=due_ms, key=key)


def requeued(sender: str, queue: str, job_id: str, task: str | None = None) -> None:
    emit(REQUEUED, sender, queue=queue, job_id=job_id, task=task)


def forced_back(sender: str, queue: str, job_id: str, reason: str) -> None:
    emit(FORCED_BACK, sender, queue=queue, job_id=job_id, reason=reason)


def handed_over(queue: str, job_id: str) -> None:
    emit(HANDED_OVER, SENDER_DELAY_WORKER, queue=queue, job_id=job_id)


def released(sender: str, queue: str, job_id: str, reason: str, delay_ms: int) -> None:
    emit(RELEASED, sender, queue=queue, job_id=job_id, reason=reason, delay_ms=delay_ms)


def dead_purged(sender: str, queue: str, count: int, job_ids: list[str] | None = None) -> None:
    """``count`` dead jobs deleted: those of ``job_ids``, or (None) the oldest."""
    if count:
        emit(DEAD_PURGED, sender, queue=queue, count=count, job_ids=job_ids)


def queue_paused(sender: str, queue: str, note: str) -> None:
    emit(QUEUE_PAUSED, sender, queue=queue, note=note)


def queue_resumed(sender: str, queue: str) -> None:
    emit(QUEUE_RESUMED, sender, queue=queue)


def schedule_paused(sender: str, queue: str, schedule: str) -> None:
    emit(SCHEDULE_PAUSED, sender, queue=queue, schedule=schedule)


def schedule_resumed(sender: str, queue: str, schedule: str, next_ms: int) -> None:
    emit(SCHEDULE_RESUMED, sender, queue=queue, schedule=schedule, next_ms=next_ms)


def dispatched_batch(queue: str, lateness: list[int | None]) -> None:
    """One line for a batch of more than ``LOG_EACH_DISPATCH`` jobs dispatched from
    ``queue`` (the per-job lines are at DEBUG then, as for the client's batch writes): a
    burst does not cost a log line per job."""
    if logger.isEnabledFor(INFO):
        emit(DISPATCHED_BATCH, SENDER_DELAY_WORKER, queue=queue, lateness=lateness)


class Dispatching(Protocol):
    """A job whose Celery message was published (the delay worker's ``Claimed``)."""

    @property
    def queue(self) -> str: ...
    @property
    def id(self) -> str: ...
    @property
    def task(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def lateness_ms(self) -> int | None: ...


def dispatched_all(jobs: Sequence[Dispatching]) -> None:
    """The jobs one publish sent: per queue, a line per job, or for more than
    ``LOG_EACH_DISPATCH`` one INFO line and the jobs' at DEBUG; a signal per job. Nothing is
    grouped when INFO is off and no one listens (DEBUG is off then too)."""
    if not DISPATCHED.wanted(INFO):
        return
    by_queue: dict[str, list[Dispatching]] = {}
    for job in jobs:
        by_queue.setdefault(job.queue, []).append(job)
    for queue, group in by_queue.items():
        lateness = [job.lateness_ms for job in group]
        level = INFO
        if len(group) > LOG_EACH_DISPATCH:
            dispatched_batch(queue, lateness)
            level = DEBUG
        if not DISPATCHED.wanted(level):  # (a burst's DEBUG lines, mostly: asked once)
            continue
        for job, late in zip(group, lateness, strict=True):
            dispatched(queue, job.id, job.task, job.attempt, late, level)


def dispatched(
    queue: str,
    job_id: str,
    task: str,
    attempt: int,
    lateness_ms: int | None,
    level: int = INFO,
) -> None:
    if DISPATCHED.wanted(level):
        emit(DISPATCHED, SENDER_DELAY_WORKER, level, queue=queue, job_id=job_id, task=task,
             attempt=attempt, lateness_ms=lateness_ms)  # fmt: skip


def reaped(queue: str, rescheduled: int, dead: int) -> None:
    if rescheduled or dead:
        emit(REAPED, SENDER_DELAY_WORKER, queue=queue, rescheduled=rescheduled, dead=dead)


def dead(
    sender: str,
    queue: str,
    job_id: str,
    reason: str,
    cause: str,
    task: str | None = None,
    attempt: int | None = None,
) -> None:
    emit(DEAD, sender, queue=queue, job_id=job_id, task=task, attempt=attempt, reason=reason,
         cause=cause)  # fmt: skip


def started(
    queue: str,
    job_id: str,
    task: str,
    attempt: int,
    lateness_ms: int | None,
    wait_ms: int | None,
) -> None:
    if STARTED.wanted():
        emit(STARTED, SENDER_CELERY_WORKER, queue=queue, job_id=job_id, task=task,
             attempt=attempt, lateness_ms=lateness_ms, wait_ms=wait_ms)  # fmt: skip


def succeeded(
    queue: str, job_id: str, task: str, attempt: int, runtime: float, acked: bool
) -> None:
    if SUCCEEDED.wanted():
        emit(SUCCEEDED, SENDER_CELERY_WORKER, queue=queue, job_id=job_id, task=task,
             attempt=attempt, runtime=runtime, acked=acked)  # fmt: skip


def failed(
    queue: str,
    job_id: str,
    task: str,
    attempt: int,
    runtime: float,
    exception: BaseException,
    outcome: str | None,
    error: str,
) -> None:
    emit(FAILED, SENDER_CELERY_WORKER, queue=queue, job_id=job_id, task=task, attempt=attempt,
         runtime=runtime, exception=exception, outcome=outcome, error=error)  # fmt: skip


def tick(
    queue: str, schedule: str, job_id: str, at_ms: int, lateness_ms: int, runs: bool, missed: int
) -> None:
    level = WARNING if missed else DEBUG
    if TICKED.wanted(level):
        emit(TICKED, SENDER_DELAY_WORKER, level, queue=queue, schedule=schedule, job_id=job_id,
             at_ms=at_ms, lateness_ms=lateness_ms, runs=runs, missed=missed)  # fmt: skip
