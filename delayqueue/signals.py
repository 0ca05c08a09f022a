"""Django signals sent at each transition of a job (docs/operations.md has the table).

Every signal is sent with ``send_robust``: a receiver that raises is logged (logger
``delayqueue.signals``) and never breaks the transition, which has already happened in
Redis when the signal is sent. Receivers run in the process that made the transition, so
a receiver of ``job_started`` must be connected in the Celery worker (for example in an
``AppConfig.ready()``), one of ``job_dispatched`` in the delay worker.

``sender`` is the kind of process that sent the signal: one of the ``SENDER_*`` strings
below. Compare it with ``==`` in the receiver (``connect(sender=...)`` compares identity).

Every signal carries ``queue``, and ``job_id`` when it is about one job (not ``job_reaped``,
``job_limited``, ``dead_purged``, ``queue_paused``, ``queue_resumed``, ``schedule_paused``,
``schedule_resumed``);
the others are listed per signal. Times are epoch ms of Redis's clock (``due_ms``) or
durations (``*_ms`` ints, ``runtime`` seconds); ``None`` where the sender does not know one.
"""

from __future__ import annotations

from django.dispatch import Signal

SENDER_CLIENT = "client"  # the client API (enqueue, cancel, reschedule): web processes, shells
SENDER_DELAY_WORKER = "delay_worker"  # manage.py run_delay_worker
SENDER_CELERY_WORKER = "celery_worker"  # the Celery worker running the job's task
SENDER_ADMIN = "admin"  # the admin's and the command line's actions (services.operations)

#: A job was written to scheduled (client). ``task``, ``due_ms``, ``key`` (dedupe key or
#: None), ``outcome`` ("created", "replaced", or "kept": the key kept an existing job,
#: whose id ``job_id`` then is, and nothing new was scheduled).
job_scheduled = Signal()

#: A scheduled job was removed (client, admin). ``key`` (the dedupe key it was cancelled
#: by, or None).
job_cancelled = Signal()

#: A scheduled job was moved to a new due time (client, admin). ``due_ms``, ``key``.
job_rescheduled = Signal()

#: A claimed job's Celery message was published (delay worker). ``task``, ``attempt``
#: (the attempt this dispatch may start, 1 for the first), ``lateness_ms`` (due ->
#: dispatched; None while the claim reply carries no due time).
job_dispatched = Signal()

#: The job's task starts in a Celery worker (its fencing token was current). ``task``,
#: ``attempt``, ``lateness_ms`` (due -> started; None without a due time in the message),
#: ``wait_ms`` (claimed by the delay worker -> started: the time in the broker's queue, by
#: Redis's clock against the Celery host's clock; None for a message without it).
job_started = Signal()

#: The task returned (Celery worker). ``task``, ``attempt``, ``runtime`` (seconds),
#: ``acked`` (False when the job was no longer in flight under this dispatch's token:
#: an operator moved it, or a later dispatch took over).
job_succeeded = Signal()

#: The task raised (Celery worker). ``task``, ``attempt``, ``runtime``, ``exception``,
#: ``outcome``: "retry" (scheduled again after a backoff), "dead" (``job_dead`` follows),
#: "stale" (a later dispatch owns the job: nothing recorded), or None when the failure
#: could not be recorded (Redis unreachable; the job is reaped after its deadline).
job_failed = Signal()

#: A job moved to dead with a known id (Celery worker after its last attempt; delay worker
#: for data that can never run). ``task`` (may be None), ``attempt``, ``reason``, ``cause``:
#: "failed" (attempts used up) or "buried" (unknown task, corrupt data, unpublishable).
#: Jobs that die when reaped are counted in ``job_reaped``'s ``dead`` (the reap script
#: reports counts, not ids).
job_dead = Signal()

#: A dead job was put back to scheduled with its attempts reset (admin). ``task`` may be None.
job_requeued = Signal()

#: In-flight jobs passed their visibility deadline (delay worker), per queue and pass:
#: ``rescheduled`` (count, including dispatches that never started and got their attempt
#: back) and ``dead`` (count). No ``job_id``.
job_reaped = Signal()

#: A job was not started because it expired (its ``expires`` passed before it could start):
#: it is dead with the reason "expired" (``job_dead`` follows, cause "expired"). Sent by the
#: delay worker (found at claim) or the Celery worker (found at start). ``task`` (may be None).
job_expired = Signal()

#: Due jobs a rate or concurrency limit kept scheduled in one claim (delay worker), per queue
#: and pass: ``count``. No ``job_id``: they are due again when the limit next allows. Also
#: sent by the Celery worker (``count`` 1) for a job its rate did not allow to start when it
#: began (it was handed off late): put back to scheduled, not run.
job_limited = Signal()

#: A schedule's occurrence came due and the schedule moved on to its next one (delay
#: worker; periodic jobs). ``schedule`` (its name), ``job_id`` (the occurrence's job),
#: ``at_ms`` (the occurrence's instant), ``lateness_ms`` (instant -> this step), ``runs``
#: (False when missed="skip" removed it unrun), ``missed`` (occurrences counted as missed in
#: this step: they came while every delay worker was down).
schedule_ticked = Signal()

#: An in-flight job was forced back to scheduled, due now, by an operator (admin, command
#: line: "force back"). ``reason`` (the operator's). The attempt counts; a dispatch still
#: running keeps its token and may still ack the job.
job_forced_back = Signal()

#: An in-flight job went back to scheduled without a failure of its task, its attempt given
#: back: the broker refused its dispatch, or a Celery worker could not run the message's form
#: (it is sent again, one job to a message). ``reason``, ``delay_ms`` (how long until it is
#: due again). Sent by the delay worker, or by the Celery worker that discarded a batch.
job_released = Signal()

#: Dead jobs were deleted, their data too (admin, command line: "delete", "purge all").
#: ``count``, ``job_ids`` (the ids deleted, or None for "purge all", which deletes the
#: oldest by count). No ``job_id``.
dead_purged = Signal()

#: A queue was paused: its delay workers claim nothing from it until it is resumed (admin,
#: command line). ``note`` (who paused it and why). No ``job_id``.
queue_paused = Signal()

#: A paused queue was resumed and its delay workers woken (admin, command line). No
#: ``job_id``.
queue_resumed = Signal()

#: A periodic schedule was paused: its next occurrence's job is gone and none is planned
#: until it is resumed (admin, command line). ``schedule`` (its name). No ``job_id``.
schedule_paused = Signal()

#: A paused schedule was resumed: its next occurrence is planned (admin, command line).
#: ``schedule``, ``next_ms`` (that occurrence's instant, epoch ms). No ``job_id``.
schedule_resumed = Signal()

ALL = {
    "scheduled": job_scheduled,
    "cancelled": job_cancelled,
    "rescheduled": job_rescheduled,
    "dispatched": job_dispatched,
    "started": job_started,
    "succeeded": job_succeeded,
    "failed": job_failed,
    "dead": job_dead,
    "requeued": job_requeued,
    "reaped": job_reaped,
    "expired": job_expired,
    "limited": job_limited,
    "ticked": schedule_ticked,
    "forced_back": job_forced_back,
    "released": job_released,
    "purged": dead_purged,
    "paused": queue_paused,
    "resumed": queue_resumed,
    "schedule_paused": schedule_paused,
    "schedule_resumed": schedule_resumed,
}
