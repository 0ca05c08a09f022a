"""Calls a task's jobs send in the round trips of their own begin and settling, rather than
in round trips of their own (``job.run_job``, ``batches.run_batch``).

A task whose class sets ``dq_rides`` (a ``Rides``) has, for each dispatch of its jobs:

- ``Rides.at_begin(...)``: a call sent with the job's ``begin``, in the same round trip.
  One the begin can carry (a Django task's ``task_started``: ``carried.begin_starting``)
  is part of the begin's own script call, written only when the dispatch runs; another is
  sent right after the begin (one pipeline: each script on its own, in order, on one
  connection; a batch's begins first, then their calls), and must check itself that the
  begin let the dispatch run (the call sees the begin's writes). Its reply, or the
  DelayQueueError it met, is ``begun(job_id)`` while the attempt runs; a job begun again (a
  batch's long run, a job with a rate) keeps the reply of its first begin;
- ``settle_with(job_id, call, report, unsent)``, from the task's code: ``call`` goes in the
  round trip that acks or fails the job (a batch's: at its end): carried by the ack or the
  fail when it can be (a Django task's ``task_finished``: ``carried.settling_with``,
  written first), else before it; ``report(reply)`` is called after it, before the ack's
  or the fail's own report.

``delayqueue.run_django_task`` records a Django task's start with its job's begin, and its
outcome with the ack (delayqueue/django_tasks/attempts.py): no round trip, and no script
call, of its own."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Any, Protocol

from delayqueue.engine import carried, transitions
from delayqueue.engine.direct_pipeline import run_many_direct
from delayqueue.engine.execution import run_direct
from delayqueue.engine.keys import QueueKeys
from delayqueue.errors import DelayQueueError

logger = logging.getLogger("delayqueue.runner.job")

RIDES = "dq_rides"  # the task class's attribute: its Rides


class Rides(Protocol):
    def at_begin(
        self,
        keys: QueueKeys,
        job_id: str,
        token: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        request: Any,
        due_ms: int | None,
    ) -> transitions.ScriptCall[Any] | None:
        """The call to send after the begin of the dispatch ``token`` of job ``job_id``,
        whose Celery task is called with ``args`` and ``kwargs`` (``request``: the Celery
        request of the message; ``due_ms``: its due time when known); None for none."""


class _NotRidden:
    def __repr__(self) -> str:
        return "NOT_RIDDEN"


NOT_RIDDEN: Any = _NotRidden()  # begun(): no call rode with this job's begin


def of(task: Any) -> Rides | None:
    """The ``Rides`` of a task (the task, or its bound ``run``), or None."""
    rides = getattr(getattr(task, "__self__", task), RIDES, None)
    return rides if callable(getattr(rides, "at_begin", None)) else None


def ride(
    rides: Rides | None,
    keys: QueueKeys,
    job_id: str,
    token: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    request: Any,
    due_ms: int | None,
) -> transitions.ScriptCall[Any] | None:
    """``rides.at_begin(...)``; None when there are no rides or they cannot make their
    call (logged: the task's code then goes without, as when none rode)."""
    if rides is None:
        return None
    try:
        return rides.at_begin(keys, job_id, token, args, kwargs, request, due_ms)
    except Exception:
        logger.exception("job %s on %s: no call rides with its begin", job_id, keys.queue)
        return None


def begin_with(
    begin: transitions.ScriptCall[transitions.Begun], call: transitions.ScriptCall[Any]
) -> tuple[transitions.Begun, Any]:
    """``begin`` and ``call`` in one round trip: the begin's reply (its error raised), and
    the call's reply or error. A call the begin can carry (a Django task's start:
    ``carried.begin_starting``) is one script call with it; another is sent after it
    (on a direct connection: engine/direct_pipeline.py)."""
    folded = carried.begin_starting(begin, call)
    if folded is not None:
        # (strict=False: under DURABLE, a replica slow to acknowledge is a warning)
        return run_direct(folded, strict=False)
    began, ridden = run_many_direct([begin, call])
    if isinstance(began, DelayQueueError):
        raise began
    return began, ridden


class _Running(threading.local):
    job_id: str | None = None
    begun: Any = NOT_RIDDEN
    settle: Any = None


_running = _Running()


@contextmanager
def running(job_id: str, begun: Any, settle: Any) -> Iterator[None]:
    """While job ``job_id`` runs in this thread: its ``begun`` reply, and the ``settle``
    (runner.attempt.Settle) its ack or fail goes to."""
    before = (_running.job_id, _running.begun, _running.settle)
    _running.job_id, _running.begun, _running.settle = job_id, begun, settle
    try:
        yield
    finally:
        _running.job_id, _running.begun, _running.settle = before


@contextmanager
def running_each(settle: Any) -> Iterator[Callable[[str | None, Any], None]]:
    """``running`` for the jobs of a batch, which share one ``settle``: it gives a function
    that says which job runs now (``(job_id, begun)``; ``(None, NOT_RIDDEN)`` between jobs),
    one call per job rather than a context of its own."""
    before = (_running.job_id, _running.begun, _running.settle)
    _running.job_id, _running.begun, _running.settle = None, NOT_RIDDEN, settle
    state = _running

    def now(job_id: str | None, begun: Any) -> None:
        state.job_id, state.begun = job_id, begun

    try:
        yield now
    finally:
        _running.job_id, _running.begun, _running.settle = before


def begun(job_id: str) -> Any:
    """The reply (or DelayQueueError) of the call that rode with the begin of job
    ``job_id``, running in this thread; NOT_RIDDEN when none did."""
    return _running.begun if _running.job_id == job_id else NOT_RIDDEN


def settle_with(
    job_id: str,
    call: transitions.ScriptCall[Any],
    report: Callable[[Any], None],
    unsent: str,
) -> bool:
    """Send ``call`` in the round trip that settles job ``job_id``, running in this thread,
    carried by its ack or fail or before it (``Carrying``), and ``report(reply)`` after it
    (the reply is the DelayQueueError it met when it could not be written: ``unsent`` says
    what that means, for the log).
    False, and nothing sent, when no such job runs here: the caller sends it itself."""
    if _running.job_id != job_id or _running.settle is None:
        return False
    _running.settle.add(call, report, unsent)
    return True


# A task's outcome call (``settle_with``), held for its job's ack or fail to carry: the
# call, its report and its unsent (a plain tuple: one per job, made fast)
Held = tuple[transitions.ScriptCall[Any], Callable[[Any], None], str]


class Carrying:
    """The settling of jobs in one round trip (``SettleTogether``, a batch's), with a task's
    outcome in its job's ack or fail: the call ``settle_with`` adds (a Django task's
    ``task_finished``) is held until the job's ack or fail comes next, which carries it
    (``carried.settling_with``: one script call, the outcome written first), and the
    outcome's report is called before the settling's. A call it cannot carry is sent before
    it, as its own. ``keep`` takes each call to send."""

    held: Held | None = None

    def add(
        self, call: transitions.ScriptCall[Any], report: Callable[[Any], None], unsent: str
    ) -> None:
        held, self.held = self.held, None
        if held is None:
            if call.script == carried.CARRIED_OUTCOME:
                self.held = (call, report, unsent)
                return
        else:
            held_call, held_report, held_unsent = held
            carrying = carried.settling_with(call, held_call)
            if carrying is None:
                self.keep(*held)
            else:
                call, report = carrying, partial(_both, held_report, held_unsent, report)
        self.keep(call, report, unsent)

    def keep_held(self) -> None:
        """A held call that nothing came to carry: sent as its own."""
        held, self.held = self.held, None
        if held is not None:
            self.keep(*held)

    def keep(
        self, call: transitions.ScriptCall[Any], report: Callable[[Any], None], unsent: str
    ) -> None:
        raise NotImplementedError


def _both(
    outcome_report: Callable[[Any], None],
    outcome_unsent: str,
    report: Callable[[Any], None],
    reply: Any,
) -> None:
    """The reports of a settling call that carried an outcome: the outcome's, then its own
    (each with the error, when the call met one)."""
    if isinstance(reply, DelayQueueError):
        outcome_report(reply)
        report(reply)
        return
    settled, recorded = reply
    if isinstance(recorded, DelayQueueError):
        logger.error("%s (%s)", outcome_unsent, recorded)
    outcome_report(recorded)
    report(settled)


class SettleTogether(Carrying):
    """The settling of one job of its own message whose task rides: what its code adds
    and its ack or fail, sent in one round trip by ``send`` (runner.attempt.Settle)."""

    def __init__(self) -> None:
        self.calls: list[transitions.ScriptCall[Any]] = []
        self.reports: list[Callable[[Any], None]] = []
        self.unsent: list[str] = []

    def keep(
        self, call: transitions.ScriptCall[Any], report: Callable[[Any], None], unsent: str
    ) -> None:
        self.calls.append(call)
        self.reports.append(report)
        self.unsent.append(unsent)

    def send(self) -> None:
        self.keep_held()
        calls, reports, unsent = self.calls, self.reports, self.unsent
        self.calls, self.reports, self.unsent = [], [], []
        if not calls:
            return
        try:
            # (strict=False: under DURABLE, a replica slow to acknowledge is a warning)
            if len(calls) == 1 and calls[0].resend_safe:
                replies = [run_direct(calls[0], strict=False)]
            else:
                replies = run_many_direct(calls)  # (run_many's where one is not resend-safe)
        except DelayQueueError as exc:
            replies = [exc] * len(calls)
        for reply, what in zip(replies, unsent, strict=True):
            if isinstance(reply, DelayQueueError):
                logger.error("%s (%s)", what, reply)
        for report, reply in zip(reports, replies, strict=True):
            report(reply)
