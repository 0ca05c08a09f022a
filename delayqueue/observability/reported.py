"""State transitions that report themselves: one call runs the script and sends its event.

Each function here returns the engine's ``ScriptCall`` for a transition
(``delayqueue.engine.transitions``) with its reply reader extended to report the event
(``events``: the log line, the signal, the metrics) once the script has run and said the
job moved. Callers run it as any other call (``run``, ``run_all``, ``run_many``, ``arun``...)
and never pair a script call with its event by hand. A call that fails, or whose script says
nothing moved, reports nothing. The Celery side's settling calls (``ack``, ``fail``) are
``Settling`` pairs instead, as its ``Settle`` takes them (runner/attempt.py): the call, and
what reports its reply or the error that kept it from being recorded.

A call on a hot path (``enqueue``, ``ack``) is the engine's own, unwrapped, when its event
would neither log nor send (``Event.wanted``): nothing is built for no one.

The engine stays free of Django and of signals: it runs calls; this module says what a
reply means to the outside world.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal, NamedTuple, Protocol, TypeVar

from delayqueue.engine import plain_enqueue, transitions
from delayqueue.engine.begin_reply import Begun, parse_begun
from delayqueue.engine.keys import QueueKeys
from delayqueue.engine.plain_enqueue import PlainWritten
from delayqueue.engine.transitions import (
    Cancelled,
    Claim,
    Enqueued,
    FailOutcome,
    Id,
    NewJob,
    Reaped,
    RequeueOutcome,
    Rescheduled,
    ScriptCall,
)
from delayqueue.errors import DelayQueueError
from delayqueue.observability import events, limit_events
from delayqueue.observability.catalog import SCHEDULED, SUCCEEDED
from delayqueue.observability.emit import DEBUG, INFO, logger
from delayqueue.signals import SENDER_CELERY_WORKER

T = TypeVar("T")


def reporting(call: ScriptCall[T], report: Callable[[T], None]) -> ScriptCall[T]:
    """``call`` whose reply, once read, is handed to ``report`` before it is returned."""
    parse = call.parse

    def parse_and_report(reply: object) -> T:
        result = parse(reply)
        report(result)
        return result

    return call._replace(parse=parse_and_report)


# ---- enqueue: (new) -> scheduled -----------------------------------------------------------


class Named(Protocol):
    @property
    def task(self) -> str: ...
    @property
    def key(self) -> str | None: ...


class Writing(Protocol):
    """A job being written, as the event needs it: its task and dedupe key (the producer's
    ``JobSpec``)."""

    @property
    def job(self) -> Named: ...


class OneOff(NamedTuple):
    """A ``Named`` for a caller with no JobSpec (a schedule's "run now")."""

    task: str
    key: str | None = None


class Written(NamedTuple):
    job: OneOff


def enqueue(
    sender: str,
    keys: QueueKeys,
    jobs: Sequence[NewJob],
    writing: Sequence[Writing],
    *,
    wake_horizon_ms: int,
    level: int = INFO,
) -> ScriptCall[list[Enqueued]]:
    """(new) -> scheduled; ``job_scheduled`` per job at ``level`` (``writing[i]`` is
    ``jobs[i]``'s), and for ``level`` DEBUG (a batch's jobs) one INFO line for them all."""
    call = transitions.enqueue(keys, jobs, wake_horizon_ms=wake_horizon_ms)
    each = SCHEDULED.wanted(level)
    summed = level == DEBUG and logger.isEnabledFor(INFO)
    if not (each or summed):
        return call

    def report(replies: list[Enqueued]) -> None:
        _scheduled(sender, keys.queue, writing, replies, each, summed, level)

    return reporting(call, report)


class PlainWriting(Protocol):
    """A plain job being written (the producer's ``JobSpec``): its handle, due ms and spec."""

    @property
    def job(self) -> NamedJob: ...
    @property
    def ms(self) -> int: ...
    @property
    def packed(self) -> str: ...


class NamedJob(Named, Protocol):
    @property
    def id(self) -> str: ...


def enqueue_plain(
    sender: str,
    keys: QueueKeys,
    mode: Literal["delay", "at"],
    writing: Sequence[PlainWriting],
    *,
    wake_horizon_ms: int,
    level: int = INFO,
) -> ScriptCall[PlainWritten]:
    """``enqueue`` for plain jobs all due in one ``mode`` (engine/plain_enqueue.py), with
    the same events."""
    call = plain_enqueue.enqueue_plain(
        keys, mode, ((w.job.id, w.ms, w.packed) for w in writing), wake_horizon_ms=wake_horizon_ms
    )
    each = SCHEDULED.wanted(level)
    summed = level == DEBUG and logger.isEnabledFor(INFO)
    if not (each or summed):
        return call

    def report(reply: PlainWritten) -> None:
        replies = reply.replies or [
            Enqueued(w.job.id, reply.due_ms(mode, w.ms), "created", "scheduled") for w in writing
        ]
        _scheduled(sender, keys.queue, writing, replies, each, summed, level)

    return reporting(call, report)


def _scheduled(
    sender: str,
    queue: str,
    writing: Sequence[Writing],
    replies: list[Enqueued],
    each: bool,
    summed: bool,
    level: int,
) -> None:
    """``job_scheduled`` per job when ``each``; one line for them all when ``summed``."""
    outcomes: dict[str, int] = {}
    for written, one in zip(writing, replies, strict=True):
        if each:
            job = written.job
            events.scheduled(
                sender, queue, one.id, job.task, one.due_ms, job.key, one.outcome, level
            )
        outcomes[one.outcome] = outcomes.get(one.outcome, 0) + 1
    if summed:
        events.scheduled_batch(queue, outcomes)


# ---- claim: scheduled -> inflight (the delay worker) ------------------------------------


def claim(
    keys: QueueKeys, *, limit: int, visibility_ms: int, ahead_ms: int = 0
) -> ScriptCall[Claim]:
    """Due jobs -> in flight; the jobs it found expired (``job_expired``, ``job_dead``) and
    those a limit held (``job_limited``)."""

    def report(claim: Claim) -> None:
        limit_events.claimed(keys.queue, claim.expired, claim.held)

    call = transitions.claim(keys, limit=limit, visibility_ms=visibility_ms, ahead_ms=ahead_ms)
    return reporting(call, report)


# ---- the Celery side: ack, fail ----------------------------------------------------------


def begin(
    keys: QueueKeys,
    job_id: str,
    token: str,
    *,
    visibility_ms: int,
    horizon_ms: int = 0,
    after: int = 0,
) -> ScriptCall[Begun]:
    """The Celery side's start of a dispatch (``transitions.begin``). Its one state change
    of its own, a job its rate puts back to scheduled, reports ``job_limited``'s line here;
    an expired job's move to dead is ``expire``, and ``job_started`` is sent when the task
    starts (after a job handed over ahead is held until its due time: runner/attempt.py).
    Once per job: its reader is a partial (no ``reporting`` closures and copy of the call)."""
    report = partial(_begun, keys.queue, job_id)
    return transitions.begin(
        keys, job_id, token, visibility_ms=visibility_ms, horizon_ms=horizon_ms, after=after,
        parse=report,
    )  # fmt: skip


def _begun(queue: str, job_id: str, reply: Any) -> Begun:
    begun = parse_begun(reply)
    if begun.limited_until is not None:
        limit_events.started_over_rate(queue, job_id, begun.limited_until)
    return begun


class Settling(NamedTuple):
    """A settling call and what reports it: ``report`` takes the call's read reply, or the
    DelayQueueError that kept it from being recorded (runner/attempt.py's ``Settle``)."""

    call: ScriptCall[Any]
    report: Callable[[Any], None]


def _nothing(reply: Any) -> None:
    pass


def ack(
    keys: QueueKeys, job_id: str, token: str, *, task: str, attempt: int, runtime: float
) -> Settling:
    """In flight -> gone, the task succeeded: ``job_succeeded`` (``acked`` False when a
    later dispatch owned the job); nothing when the ack could not be sent."""
    call = transitions.ack(keys, job_id, token)
    if not SUCCEEDED.wanted():
        return Settling(call, _nothing)

    def report(reply: Any) -> None:
        if not isinstance(reply, DelayQueueError):
            events.succeeded(keys.queue, job_id, task, attempt, runtime, bool(reply))

    return Settling(call, report)


def fail(
    keys: QueueKeys,
    job_id: str,
    token: str,
    *,
    backoff_ms: int,
    error: str,
    traceback: str,
    max_attempts: int,
    dead_max: int,
    task: str,
    attempt: int,
    runtime: float,
    exception: BaseException,
) -> Settling:
    """In flight -> scheduled after its backoff, or dead: ``job_failed`` with its outcome
    (None when the failure could not be recorded), then ``job_dead`` when it died."""
    call = transitions.fail(
        keys, job_id, token, backoff_ms=backoff_ms, error=error, traceback=traceback,
        max_attempts=max_attempts, dead_max=dead_max,
    )  # fmt: skip

    def report(reply: Any) -> None:
        outcome: FailOutcome | None = None if isinstance(reply, DelayQueueError) else reply
        events.failed(keys.queue, job_id, task, attempt, runtime, exception, outcome, error)
        if outcome == "dead":
            events.dead(SENDER_CELERY_WORKER, keys.queue, job_id, error, "failed", task, attempt)

    return Settling(call, report)


# ---- the client's and the admin's moves --------------------------------------------------


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
            events.requeued(sender, keys.queue, id_text(job_id))

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
            events.dead(sender, keys.queue, id_text(job_id), reason, "buried", task, attempt)

    return reporting(transitions.bury(keys, job_id, reason), report)


def expire(sender: str, keys: QueueKeys, job_id: str, task: str | None = None) -> ScriptCall[bool]:
    """A job that expired before it could start -> dead, reason "expired": ``job_expired``
    then ``job_dead`` (cause "expired")."""

    def report(buried: bool) -> None:
        if buried:
            limit_events.expired(sender, keys.queue, job_id, task)

    return reporting(transitions.bury(keys, job_id, limit_events.EXPIRED_REASON), report)


def reap(keys: QueueKeys, *, limit: int, max_attempts: int) -> ScriptCall[Reaped]:
    """In flight past the visibility timeout -> scheduled again, or dead; one line per pass
    that moved any (and ``jobs_reaped``)."""

    def report(reaped: Reaped) -> None:
        events.reaped(keys.queue, reaped.rescheduled, reaped.dead)

    return reporting(transitions.reap(keys, limit=limit, max_attempts=max_attempts), report)


def handed_over(keys: QueueKeys, job_id: str, token: str) -> ScriptCall[bool]:
    """In flight -> gone, at its publish, for a message run by a Celery worker without
    delayqueue's side (nothing else would ack it): the ``handed_over`` line."""

    def report(acked: bool) -> None:
        if acked:
            events.handed_over(keys.queue, job_id)

    return reporting(transitions.ack(keys, job_id, token), report)


def release(
    sender: str,
    keys: QueueKeys,
    job_id: str,
    *,
    token: str,
    delay_ms: int,
    reason: str,
    unless_begun: bool = False,
) -> ScriptCall[bool]:
    """In flight under ``token`` -> scheduled in ``delay_ms``, its attempt given back (a
    broker outage, a form the Celery worker does not run): ``job_released``."""

    def report(moved: bool) -> None:
        if moved:
            events.released(sender, keys.queue, job_id, reason, delay_ms)

    call = transitions.release(
        keys, job_id, token=token, delay_ms=delay_ms, give_back=True, reason=reason,
        unless_begun=unless_begun,
    )  # fmt: skip
    return reporting(call, report)


def id_text(job_id: Id) -> str:
    return job_id.decode("utf-8", "backslashreplace") if isinstance(job_id, bytes) else job_id
