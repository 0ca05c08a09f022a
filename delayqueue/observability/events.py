"""What happens at each transition besides Redis: one log line (logger ``delayqueue.jobs``,
with the job's fields as ``extra`` for a JSON formatter) and one signal
(``delayqueue.signals``), which the Prometheus metrics
(``delayqueue.observability.metrics``) receive.

Called by the client API, the delay worker and the Celery side after the transition's
script returned. A log line is built only when its level is enabled, a signal's arguments
only when the signal has receivers, and a receiver that raises is logged, never raised.

Every line carries the extras ``transition``, ``queue``, ``job_id``, ``task``, ``attempt``
and ``lateness_ms`` (None where unknown), plus the transition's own (``due_ms``,
``runtime_ms``, ``wait_ms``, ``outcome``, ``reason``, ``key``, ``rescheduled``, ``dead``).
"""

from __future__ import annotations

import os

from delayqueue import signals
from delayqueue.observability.emit import DEBUG, ERROR, INFO, WARNING, log, logger, send, when

if os.environ.get("PROMETHEUS_MULTIPROC_DIR") or os.environ.get("prometheus_multiproc_dir"):
    # Multiprocess mode: every process counts into the shared directory, which a metrics
    # view serves. Otherwise a process counts once it imports
    # delayqueue.observability.metrics (to serve it: the view, run_delay_worker
    # --metrics-port), and the others send to no receiver.
    import delayqueue.observability.metrics  # noqa: F401

# ---- the client API (web processes, shells) --------------------------------------------


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
    if logger.isEnabledFor(level):
        what = {
            "created": "scheduled",
            "replaced": "scheduled (replacing the job of its key)",
            "kept": "kept (its key's job stays as it was)",
        }.get(outcome, outcome)
        log(
            level,
            "job %s %s: %s on %s, due %s",
            (job_id, what, task, queue, when(due_ms)),
            "scheduled",
            queue,
            job_id,
            task,
            due_ms=due_ms,
            key=key,
            outcome=outcome,
        )
    if signals.job_scheduled.receivers:
        send(
            signals.job_scheduled,
            sender,
            queue=queue,
            job_id=job_id,
            task=task,
            due_ms=due_ms,
            key=key,
            outcome=outcome,
        )


def scheduled_wanted(level: int) -> bool:
    """Whether ``scheduled`` at ``level`` would log or send anything (a batch write skips
    the per-job calls when not)."""
    return logger.isEnabledFor(level) or bool(signals.job_scheduled.receivers)


def scheduled_batch(queue: str, outcomes: dict[str, int]) -> None:
    """One line for the jobs of one batch write on ``queue``: outcome -> count."""
    if logger.isEnabledFor(INFO):
        total = sum(outcomes.values())
        detail = ", ".join(f"{count} {outcome}" for outcome, count in sorted(outcomes.items()))
        log(
            INFO,
            "%s jobs written on %s in one batch (%s)",
            (total, queue, detail),
            "scheduled",
            queue,
            None,
            count=total,
        )


def cancelled(sender: str, queue: str, job_id: str, key: str | None) -> None:
    if logger.isEnabledFor(INFO):
        log(INFO, "job %s cancelled on %s", (job_id, queue), "cancelled", queue, job_id, key=key)
    if signals.job_cancelled.receivers:
        send(signals.job_cancelled, sender, queue=queue, job_id=job_id, key=key)


def rescheduled(sender: str, queue: str, job_id: str, due_ms: int, key: str | None) -> None:
    if logger.isEnabledFor(INFO):
        log(
            INFO,
            "job %s rescheduled on %s, due %s",
            (job_id, queue, when(due_ms)),
            "rescheduled",
            queue,
            job_id,
            due_ms=due_ms,
            key=key,
        )
    if signals.job_rescheduled.receivers:
        send(signals.job_rescheduled, sender, queue=queue, job_id=job_id, due_ms=due_ms, key=key)


def requeued(sender: str, queue: str, job_id: str, task: str | None = None) -> None:
    if logger.isEnabledFor(INFO):
        log(INFO, "dead job %s requeued on %s", (job_id, queue), "requeued", queue, job_id, task)
    if signals.job_requeued.receivers:
        send(signals.job_requeued, sender, queue=queue, job_id=job_id, task=task)


# ---- the delay worker ----------------------------------------------------------------------


LOG_EACH_DISPATCH = 20  # a larger batch logs one INFO line, its jobs at DEBUG


def _from_due(lateness_ms: int) -> str:
    """A dispatch's lateness in words: after its due time, or ahead of it (DISPATCH_AHEAD)."""
    if lateness_ms < 0:
        return f"{-lateness_ms} ms ahead of its due time"
    return f"{lateness_ms} ms after its due time"


def dispatched_batch(queue: str, lateness: list[int | None]) -> None:
    """One line for a batch of more than ``LOG_EACH_DISPATCH`` jobs dispatched from
    ``queue`` (the per-job lines are at DEBUG then, as for the client's batch writes): a
    burst does not cost a log line per job."""
    if logger.isEnabledFor(INFO):
        known = sorted(ms for ms in lateness if ms is not None)
        late = (
            f", median {_from_due(known[len(known) // 2])}, latest {_from_due(known[-1])}"
            if known
            else ""
        )
        log(
            INFO,
            "%s jobs dispatched from %s in one batch%s",
            (len(lateness), queue, late),
            "dispatched",
            queue,
            None,
            count=len(lateness),
        )


def dispatched(
    queue: str,
    job_id: str,
    task: str,
    attempt: int,
    lateness_ms: int | None,
    level: int = INFO,
) -> None:
    if logger.isEnabledFor(level):
        late = "" if lateness_ms is None else f", {_from_due(lateness_ms)}"
        log(
            level,
            "job %s dispatched: %s on %s, attempt %s%s",
            (job_id, task, queue, attempt, late),
            "dispatched",
            queue,
            job_id,
            task,
            attempt,
            lateness_ms,
        )
    if signals.job_dispatched.receivers:
        send(
            signals.job_dispatched,
            signals.SENDER_DELAY_WORKER,
            queue=queue,
            job_id=job_id,
            task=task,
            attempt=attempt,
            lateness_ms=lateness_ms,
        )


def reaped(queue: str, rescheduled: int, dead: int) -> None:
    if not (rescheduled or dead):
        return
    if logger.isEnabledFor(WARNING):
        log(
            WARNING,
            "queue %s: %s in-flight jobs timed out and were rescheduled, %s moved to dead",
            (queue, rescheduled, dead),
            "reaped",
            queue,
            None,
            rescheduled=rescheduled,
            dead=dead,
        )
    if signals.job_reaped.receivers:
        send(
            signals.job_reaped,
            signals.SENDER_DELAY_WORKER,
            queue=queue,
            rescheduled=rescheduled,
            dead=dead,
        )


def dead(
    sender: str,
    queue: str,
    job_id: str,
    reason: str,
    cause: str,
    task: str | None = None,
    attempt: int | None = None,
) -> None:
    if logger.isEnabledFor(ERROR):
        log(
            ERROR,
            "job %s moved to dead on %s: %s",
            (job_id, queue, reason),
            "dead",
            queue,
            job_id,
            task,
            attempt,
            reason=reason,
            cause=cause,
        )
    if signals.job_dead.receivers:
        send(
            signals.job_dead,
            sender,
            queue=queue,
            job_id=job_id,
            task=task,
            attempt=attempt,
            reason=reason,
            cause=cause,
        )


# ---- the Celery side -----------------------------------------------------------------------


def started(
    queue: str,
    job_id: str,
    task: str,
    attempt: int,
    lateness_ms: int | None,
    wait_ms: int | None,
) -> None:
    if logger.isEnabledFor(DEBUG):
        wait = "" if wait_ms is None else f", {wait_ms} ms after its dispatch"
        log(
            DEBUG,
            "job %s started: %s on %s, attempt %s%s",
            (job_id, task, queue, attempt, wait),
            "started",
            queue,
            job_id,
            task,
            attempt,
            lateness_ms,
            wait_ms=wait_ms,
        )
    if signals.job_started.receivers:
        send(
            signals.job_started,
            signals.SENDER_CELERY_WORKER,
            queue=queue,
            job_id=job_id,
            task=task,
            attempt=attempt,
            lateness_ms=lateness_ms,
            wait_ms=wait_ms,
        )


def succeeded(
    queue: str, job_id: str, task: str, attempt: int, runtime: float, acked: bool
) -> None:
    if logger.isEnabledFor(INFO):
        note = "" if acked else " (no longer in flight under this dispatch: not acked)"
        log(
            INFO,
            "job %s succeeded: %s on %s, attempt %s, in %.3f s%s",
            (job_id, task, queue, attempt, runtime, note),
            "succeeded",
            queue,
            job_id,
            task,
            attempt,
            runtime_ms=round(runtime * 1000),
            outcome="acked" if acked else "stale",
        )
    if signals.job_succeeded.receivers:
        send(
            signals.job_succeeded,
            signals.SENDER_CELERY_WORKER,
            queue=queue,
            job_id=job_id,
            task=task,
            attempt=attempt,
            runtime=runtime,
            acked=acked,
        )


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
    if logger.isEnabledFor(WARNING):
        then = {
            "retry": "scheduled again after its backoff",
            "dead": "no attempt left",
            "stale": "a later dispatch owns the job",
        }.get(outcome or "", "the failure could not be recorded")
        log(
            WARNING,
            "job %s failed: %s on %s, attempt %s (%s): %s",
            (job_id, task, queue, attempt, then, error),
            "failed",
            queue,
            job_id,
            task,
            attempt,
            runtime_ms=round(runtime * 1000),
            outcome=outcome,
            reason=error,
        )
    if signals.job_failed.receivers:
        send(
            signals.job_failed,
            signals.SENDER_CELERY_WORKER,
            queue=queue,
            job_id=job_id,
            task=task,
            attempt=attempt,
            runtime=runtime,
            exception=exception,
            outcome=outcome,
        )


# ---- periodic jobs (delay worker) -----------------------------------------------------------


def tick(
    queue: str, schedule: str, job_id: str, at_ms: int, lateness_ms: int, runs: bool, missed: int
) -> None:
    level = WARNING if missed else DEBUG
    if logger.isEnabledFor(level):
        log(
            level,
            "schedule %s: occurrence %s came due (%s ms late)%s",
            (schedule, when(at_ms), lateness_ms,
             f"; {missed} occurrences missed while no delay worker ran" if missed else ""),
            "ticked",
            queue,
            job_id,
            lateness_ms=lateness_ms,
            schedule=schedule,
            missed=missed,
            runs=runs,
        )  # fmt: skip
    if signals.schedule_ticked.receivers:
        send(
            signals.schedule_ticked,
            signals.SENDER_DELAY_WORKER,
            queue=queue,
            schedule=schedule,
            job_id=job_id,
            at_ms=at_ms,
            lateness_ms=lateness_ms,
            runs=runs,
            missed=missed,
        )
