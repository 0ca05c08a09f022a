"""Every event, declared once: its transition (the log line's ``transition`` extra), its
signal, its level, its message and the fields its line and its signal carry (``Event``).
``events`` has the functions the transitions call; ``emit.emit`` says any of them."""

from __future__ import annotations

from delayqueue import signals
from delayqueue.observability.emit import DEBUG, ERROR, INFO, WARNING, Event, when

# ---- the client API (web processes, shells) --------------------------------------------

_SCHEDULED_WHAT = {
    "created": "scheduled",
    "replaced": "scheduled (replacing the job of its key)",
    "kept": "kept (its key's job stays as it was)",
}

SCHEDULED = Event(
    "scheduled",
    signals.job_scheduled,
    INFO,  # DEBUG for the jobs of a batch write, which SCHEDULED_BATCH sums up at INFO
    "job %s %s: %s on %s, due %s",
    lambda f: (
        f["job_id"],
        _SCHEDULED_WHAT.get(f["outcome"], f["outcome"]),
        f["task"],
        f["queue"],
        when(f["due_ms"]),
    ),
    extras=("due_ms", "key", "outcome"),
    sent=("queue", "job_id", "task", "due_ms", "key", "outcome"),
)

SCHEDULED_BATCH = Event(
    "scheduled",
    None,  # (each job's signal is SCHEDULED's)
    INFO,
    "%s jobs written on %s in one batch (%s)",
    lambda f: (f["count"], f["queue"], f["detail"]),
    extras=("count",),
)

CANCELLED = Event(
    "cancelled",
    signals.job_cancelled,
    INFO,
    "job %s cancelled on %s",
    lambda f: (f["job_id"], f["queue"]),
    extras=("key",),
    sent=("queue", "job_id", "key"),
)

RESCHEDULED = Event(
    "rescheduled",
    signals.job_rescheduled,
    INFO,
    "job %s rescheduled on %s, due %s",
    lambda f: (f["job_id"], f["queue"], when(f["due_ms"])),
    extras=("due_ms", "key"),
    sent=("queue", "job_id", "due_ms", "key"),
)

REQUEUED = Event(
    "requeued",
    signals.job_requeued,
    INFO,
    "dead job %s requeued on %s",
    lambda f: (f["job_id"], f["queue"]),
    sent=("queue", "job_id", "task"),
)

# ---- the admin's and the command line's (services/operations.py) -----------------------

FORCED_BACK = Event(
    "forced_back",
    signals.job_forced_back,
    WARNING,
    "in-flight job %s on %s forced back to scheduled, due now: %s",
    lambda f: (f["job_id"], f["queue"], f["reason"]),
    extras=("reason",),
    sent=("queue", "job_id", "reason"),
)

HANDED_OVER = Event(
    "handed_over",
    None,  # (its dispatch sent job_dispatched; what the task does next, delayqueue never sees)
    DEBUG,
    "job %s on %s acked as it was published: the Celery worker that runs it has no "
    "delayqueue side to ack it",
    lambda f: (f["job_id"], f["queue"]),
)

RELEASED = Event(
    "released",
    signals.job_released,
    DEBUG,  # (the delay worker logs each outage or fallback once, at ERROR)
    "in-flight job %s on %s back to scheduled, its attempt given back, due in %s ms: %s",
    lambda f: (f["job_id"], f["queue"], f["delay_ms"], f["reason"]),
    extras=("reason", "delay_ms"),
    sent=("queue", "job_id", "reason", "delay_ms"),
)

DEAD_PURGED = Event(
    "purged",
    signals.dead_purged,
    WARNING,
    "%s dead jobs deleted on %s",
    lambda f: (f["count"], f["queue"]),
    extras=("count",),
    sent=("queue", "count", "job_ids"),
)

QUEUE_PAUSED = Event(
    "paused",
    signals.queue_paused,
    WARNING,
    "queue %s paused: %s",
    lambda f: (f["queue"], f["note"]),
    extras=("note",),
    sent=("queue", "note"),
)

QUEUE_RESUMED = Event(
    "resumed",
    signals.queue_resumed,
    WARNING,
    "queue %s resumed",
    lambda f: (f["queue"],),
    sent=("queue",),
)

SCHEDULE_PAUSED = Event(
    "schedule_paused",
    signals.schedule_paused,
    WARNING,
    "schedule %s on %s paused",
    lambda f: (f["schedule"], f["queue"]),
    extras=("schedule",),
    sent=("queue", "schedule"),
)

SCHEDULE_RESUMED = Event(
    "schedule_resumed",
    signals.schedule_resumed,
    WARNING,
    "schedule %s on %s resumed, next occurrence %s",
    lambda f: (f["schedule"], f["queue"], when(f["next_ms"])),
    extras=("schedule", "next_ms"),
    sent=("queue", "schedule", "next_ms"),
)

# ---- the delay worker ----------------------------------------------------------------------


LOG_EACH_DISPATCH = 20  # a larger batch logs one INFO line, its jobs at DEBUG


def _from_due(lateness_ms: int) -> str:
    """A dispatch's lateness in words: after its due time, or ahead of it (DISPATCH_AHEAD)."""
    if lateness_ms < 0:
        return f"{-lateness_ms} ms ahead of its due time"
    return f"{lateness_ms} ms after its due time"


def _batch_lateness(lateness: list[int | None]) -> str:
    known = sorted(ms for ms in lateness if ms is not None)
    if not known:
        return ""
    return f", median {_from_due(known[len(known) // 2])}, latest {_from_due(known[-1])}"


DISPATCHED = Event(
    "dispatched",
    signals.job_dispatched,
    INFO,  # DEBUG for the jobs of a batch of more than LOG_EACH_DISPATCH
    "job %s dispatched: %s on %s, attempt %s%s",
    lambda f: (
        f["job_id"],
        f["task"],
        f["queue"],
        f["attempt"],
        "" if f["lateness_ms"] is None else f", {_from_due(f['lateness_ms'])}",
    ),
    sent=("queue", "job_id", "task", "attempt", "lateness_ms"),
)

DISPATCHED_BATCH = Event(
    "dispatched",
    None,  # (each job's signal is DISPATCHED's)
    INFO,
    "%s jobs dispatched from %s in one batch%s",
    lambda f: (len(f["lateness"]), f["queue"], _batch_lateness(f["lateness"])),
    computed=lambda f: {"count": len(f["lateness"])},
)

REAPED = Event(
    "reaped",
    signals.job_reaped,
    WARNING,
    "queue %s: %s in-flight jobs timed out and were rescheduled, %s moved to dead",
    lambda f: (f["queue"], f["rescheduled"], f["dead"]),
    extras=("rescheduled", "dead"),
    sent=("queue", "rescheduled", "dead"),
)

DEAD = Event(
    "dead",
    signals.job_dead,
    ERROR,
    "job %s moved to dead on %s: %s",
    lambda f: (f["job_id"], f["queue"], f["reason"]),
    extras=("reason", "cause"),
    sent=("queue", "job_id", "task", "attempt", "reason", "cause"),
)

# ---- the Celery side -----------------------------------------------------------------------

STARTED = Event(
    "started",
    signals.job_started,
    DEBUG,
    "job %s started: %s on %s, attempt %s%s",
    lambda f: (
        f["job_id"],
        f["task"],
        f["queue"],
        f["attempt"],
        "" if f["wait_ms"] is None else f", {f['wait_ms']} ms after its dispatch",
    ),
    extras=("wait_ms",),
    sent=("queue", "job_id", "task", "attempt", "lateness_ms", "wait_ms"),
)

SUCCEEDED = Event(
    "succeeded",
    signals.job_succeeded,
    INFO,
    "job %s succeeded: %s on %s, attempt %s, in %.3f s%s",
    lambda f: (
        f["job_id"],
        f["task"],
        f["queue"],
        f["attempt"],
        f["runtime"],
        "" if f["acked"] else " (no longer in flight under this dispatch: not acked)",
    ),
    computed=lambda f: {
        "runtime_ms": round(f["runtime"] * 1000),
        "outcome": "acked" if f["acked"] else "stale",
    },
    sent=("queue", "job_id", "task", "attempt", "runtime", "acked"),
)

_FAILED_THEN = {
    "retry": "scheduled again after its backoff",
    "dead": "no attempt left",
    "stale": "a later dispatch owns the job",
}

FAILED = Event(
    "failed",
    signals.job_failed,
    WARNING,
    "job %s failed: %s on %s, attempt %s (%s): %s",
    lambda f: (
        f["job_id"],
        f["task"],
        f["queue"],
        f["attempt"],
        _FAILED_THEN.get(f["outcome"] or "", "the failure could not be recorded"),
        f["error"],
    ),
    extras=("outcome",),
    computed=lambda f: {"runtime_ms": round(f["runtime"] * 1000), "reason": f["error"]},
    sent=("queue", "job_id", "task", "attempt", "runtime", "exception", "outcome"),
)

# ---- periodic jobs (delay worker) -----------------------------------------------------------

TICKED = Event(
    "ticked",
    signals.schedule_ticked,
    DEBUG,  # WARNING when occurrences were missed
    "schedule %s: occurrence %s came due (%s ms late)%s",
    lambda f: (
        f["schedule"],
        when(f["at_ms"]),
        f["lateness_ms"],
        f"; {f['missed']} occurrences missed while no delay worker ran" if f["missed"] else "",
    ),
    extras=("schedule", "missed", "runs"),
    sent=("queue", "schedule", "job_id", "at_ms", "lateness_ms", "runs", "missed"),
)
