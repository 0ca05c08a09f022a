"""State transitions that report themselves: one call runs the script and sends its event.

Each function here returns the engine's ``ScriptCall`` for a transition
(``delayqueue.engine.transitions``) with its reply reader extended to report the event
(``events``: the log line, the signal, the metrics) once the script has run and said the
job moved. Callers run it as any other call (``run``, ``run_all``, ``run_many``, ``arun``...)
and never pair a script call with its event by hand. A call that fails, or whose script says
nothing moved, reports nothing.

The engine stays free of Django and of signals: it runs calls; this module says what a
reply means to the outside world.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from delayqueue.engine import transitions
from delayqueue.engine.keys import QueueKeys
from delayqueue.engine.transitions import (
    Cancelled,
    Id,
    Reaped,
    RequeueOutcome,
    Rescheduled,
    ScriptCall,
)
from delayqueue.observability import events

T = TypeVar("T")


def reporting(call: ScriptCall[T], report: Callable[[T], None]) -> ScriptCall[T]:
    """``call`` whose reply, once read, is handed to ``report`` before it is returned."""
    parse = call.parse

    def parse_and_report(reply: object) -> T:
        result = parse(reply)
        report(result)
        return result

    return call._replace(parse=parse_and_report)


def cancel(
    sender: str, keys: QueueKeys, *, job_id: str = "", key: str = ""
) -> ScriptCall[Cancelled]:
    """Scheduled -> gone; ``job_cancelled`` when a job was removed."""

    def report(reply: Cancelled) -> None:
        if reply.removed:
            events.cancelled(sender, keys.queue, reply.id, key or None)

    return reporting(transitions.cancel(keys, job_id=job_id, key=key), report)


def reschedule(
    sender: str, keys: QueueKeys, *, job_id: str = "", key: str = "", mode: str, ms: int
) -> ScriptCall[Rescheduled]:
    """Scheduled -> scheduled at a new due time; ``job_rescheduled`` when one moved."""

    def report(reply: Rescheduled) -> None:
        if reply.due_ms is not None:
            events.rescheduled(sender, keys.queue, reply.id, reply.due_ms, key or None)

    call = transitions.reschedule(keys, job_id=job_id, key=key, mode=mode, ms=ms)
    return reporting(call, report)


def requeue(sender: str, keys: QueueKeys, job_id: Id) -> ScriptCall[RequeueOutcome]:
    """Dead -> scheduled, due now; ``job_requeued`` when it was requeued."""

    def report(outcome: RequeueOutcome) -> None:
        if outcome == "requeued":
            events.requeued(sender, keys.queue, _text(job_id))

    return reporting(transitions.requeue(keys, job_id), report)


def bury(
    sender: str,
    keys: QueueKeys,
    job_id: Id,
    reason: str,
    *,
    task: str | None = None,
    attempt: int | None = None,
) -> ScriptCall[bool]:
    """Scheduled or in flight -> dead, for a job that can never run; ``job_dead``."""

    def report(buried: bool) -> None:
        if buried:
            events.dead(sender, keys.queue, _text(job_id), reason, "buried", task, attempt)

    return reporting(transitions.bury(keys, job_id, reason), report)


def reap(keys: QueueKeys, *, limit: int, max_attempts: int) -> ScriptCall[Reaped]:
    """In flight past the visibility timeout -> scheduled again, or dead; one line per pass
    that moved any (and ``jobs_reaped``)."""

    def report(reaped: Reaped) -> None:
        events.reaped(keys.queue, reaped.rescheduled, reaped.dead)

    return reporting(transitions.reap(keys, limit=limit, max_attempts=max_attempts), report)


def _text(job_id: Id) -> str:
    return job_id.decode("utf-8", "backslashreplace") if isinstance(job_id, bytes) else job_id
