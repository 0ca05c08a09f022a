"""The batched hand-off, Celery side: several due jobs of one task in one Celery message,
run one after another in one pool process.

Each job is still begun, acked, retried or buried on its own, under its own fencing token;
the round trips are shared: one to begin every job of the batch, one to settle (ack or
fail) them all at its end. What it trades (docs/design.md, "Batched hand-off"):

- Celery sees one task, ``delayqueue.run_batch``: its signals, time limits, rate limit and
  Flower's rows are the batch's, not each job's (delayqueue's own signals and log lines
  are still per job).
- A crash or a hard time limit mid-batch leaves the jobs it began in flight; they are
  reaped after their visibility timeout and run again (at least once, as for one job whose
  ack was lost). Jobs settled so far stay settled.
- A batch that runs for half the visibility timeout settles what ran and begins the rest
  again, so a long batch never lets its later jobs be reaped while it still holds them.
- A task with rides (``riders.py``) sends its calls in the same round trips: one after each
  job's first begin, and what its code adds before each job's ack or fail.
- The round trips go on a direct connection (engine/direct_pipeline.py: hiredis packs the
  calls and reads the replies), or through redis-py's pipeline where one of the calls is
  not safe to send twice (a fail), on a Redis Cluster, or with DURABLE.
- A job with a rate is counted at its begin (begin.lua, docs/limits.md), at the latest
  instant it may start: its begin's, or, when the rate's window has room for every job the
  batch still starts after it, that instant plus a horizon (up to HORIZON, at most a tenth
  of the window) that the job is counted at instead. One that would start more than
  RATE_SLACK after the instant counted is begun again first, with the jobs after it (all of
  them when it had a horizon, else as many as ran since the last begin, about as many as
  start within RATE_SLACK) in the same round trip; one its rate does not allow then is put
  back, not run. A rate that is far from reached thus costs a batch one begin per job.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from celery import current_task

from delayqueue.conf import get_settings
from delayqueue.engine import carried, transitions
from delayqueue.engine.direct_pipeline import run_many_direct
from delayqueue.engine.keys import QueueKeys, queue_keys
from delayqueue.errors import DelayQueueError
from delayqueue.integrations import trace_context
from delayqueue.observability import reported
from delayqueue.runner import riders
from delayqueue.runner.attempt import Attempt, Backoff, run_attempt
from delayqueue.runner.expired import bury_expired
from delayqueue.wire import HEADER_TRACES, BatchEntry, valid_dispatch

logger = logging.getLogger(__name__)

# Seconds a job with a rate may start after the instant its begin counted (docs/limits.md,
# "Clock and skew"); later, the rest of the batch is begun again first.
RATE_SLACK = 0.005
# The horizon (ms) a batch asks begin for (begin.lua grants at most a tenth of the window).
HORIZON_MS = 60_000


@dataclass
class BatchJob(BatchEntry):
    """One job of a batch message as it runs here."""

    attempt: int = 0
    # set by its begin: Redis's clock as it ran (microseconds), the time.monotonic() of its reply
    begun_us: int | None = None
    replied: float = 0.0
    rated: bool = False  # it has a rate: begun again when it would start RATE_SLACK late
    start_by: float = 0.0  # rated: the time.monotonic() after which it is begun again
    horizon: bool = False  # rated: its begin counted it at a horizon, later than the begin
    ridden: Any = riders.NOT_RIDDEN  # the reply of its rides' call at its first begin


@dataclass
class _Settle(riders.Carrying):
    """The calls that settle what ran, sent in one round trip, and what to report then (a
    job's outcome carried by its ack or fail: ``riders.Carrying``)."""

    calls: list[transitions.ScriptCall[Any]] = field(default_factory=list)
    reports: list[Callable[[Any], None]] = field(default_factory=list)

    def keep(
        self, call: transitions.ScriptCall[Any], report: Callable[[Any], None], unsent: str
    ) -> None:
        """(``unsent`` is not logged per job: ``send`` says once when the round trip
        failed.)"""
        self.calls.append(call)
        self.reports.append(report)

    def send(self) -> None:
        self.keep_held()
        if not self.calls:
            return
        try:
            replies = run_many_direct(self.calls)  # (run_many where a call is a fail)
        except DelayQueueError as exc:
            # Not raised: the jobs ran. They stay in flight and are reaped and run again
            # after their visibility timeout (at least once).
            logger.error("a batch's %s results could not be recorded (%s)", len(self.calls), exc)
            replies = [exc] * len(self.calls)
        for report, reply in zip(self.reports, replies, strict=True):
            report(reply)
        self.calls, self.reports = [], []


def run_batch(
    call: Callable[[BatchJob], Any],
    queue: str,
    task: str,
    entries: Any,
    *,
    claimed_ms: int | None = None,
    backoff: Backoff | None = None,
    visibility_timeout: float | None = None,
    rides: riders.Rides | None = None,
) -> int:
    """Run the jobs of one batch message, each with ``call(job)`` (which runs the task's
    function on its arguments); how many succeeded. A job's exception is recorded (retry
    or dead) and the batch goes on. ``rides``: the task's (riders.py)."""
    jobs = [BatchJob.parse(entry) for entry in entries]
    valid = [j for j in jobs if j is not None and valid_dispatch(queue, j.id, j.token)]
    if len(valid) != len(entries):
        logger.warning(
            "batch of %s on %s: %s entries are not delayqueue dispatches, not run",
            task,
            queue,
            len(entries) - len(valid),
        )
    if not valid:
        return 0
    # What is the same for every job of the batch is looked up once (the work left per
    # job is counted by bench/batch_profile.py).
    run = _Run(
        queue_keys(queue),
        queue,
        # The task's own visibility timeout when it sets one (begin.lua applies the one
        # stored with each job; this decides when the batch begins its later jobs again).
        int((visibility_timeout or get_settings().visibility_timeout) * 1000),
        rides,
        getattr(current_task, "request", None),
    )
    traced = bool(getattr(run.request, HEADER_TRACES, None))  # (contexts of its jobs)
    pending = deque(_begin(run, valid))
    begun_at = time.monotonic()
    renew_after = run.visibility_ms / 2000  # (seconds)
    settle = _Settle()
    succeeded = 0
    again = False  # the next job was just begun again: it runs
    ran = 0  # jobs run since the last begin: about as many as start within RATE_SLACK
    with riders.running_each(settle) as now_running:
        while pending:
            if time.monotonic() - begun_at > renew_after:
                settle.send()
                pending = deque(_begin(run, list(pending)))
                begun_at = time.monotonic()
                continue
            job = pending.popleft()
            if job.rated and not again and time.monotonic() > job.start_by:
                more = len(pending) if job.horizon else min(ran, len(pending))
                chunk = [job] + [pending.popleft() for _ in range(more)]
                pending.extendleft(reversed(_begin(run, chunk, len(pending))))
                again, ran = True, 0
                continue
            again, ran = False, ran + 1
            attempt = Attempt(
                run.keys,
                queue,
                job.id,
                job.token,
                task,
                job.attempt,
                job.due_ms,
                claimed_ms,
                job.begun_us,
                job.replied,
                trace_context.from_request(run.request, job.id) if traced else "",
            )
            now_running(job.id, job.ridden)
            try:
                outcome = run_attempt(attempt, partial(call, job), backoff, settle)
            finally:
                now_running(None, riders.NOT_RIDDEN)
                job.ridden = None  # (read: not kept till the batch's end)
            succeeded += outcome.succeeded
    settle.send()
    return succeeded


class _Run(NamedTuple):
    """What every begin of one batch message shares."""

    keys: QueueKeys
    queue: str
    visibility_ms: int
    rides: riders.Rides | None
    request: Any  # the batch message's Celery request


def _begin(run: _Run, jobs: list[BatchJob], later: int = 0) -> list[BatchJob]:
    """Begin every job in one round trip (``later``: jobs the batch starts after them), with
    the calls of the task's rides (a job's first begin's: carried by the begin, else after
    the begins); the jobs this dispatch may run."""
    keys, queue, visibility_ms, rides = run.keys, run.queue, run.visibility_ms, run.rides
    horizon = min(HORIZON_MS, visibility_ms // 2)
    request = run.request
    calls: list[transitions.ScriptCall[Any]] = []
    folded_at: list[int] = []  # the begins that carry their job's ride (one script call)
    after: list[tuple[int, transitions.ScriptCall[Any]]] = []  # rides sent after the begins
    for i, j in enumerate(jobs):
        call: transitions.ScriptCall[Any] = reported.begin(
            keys,
            j.id,
            j.token,
            visibility_ms=visibility_ms,
            horizon_ms=horizon,
            after=len(jobs) - i - 1 + later,
        )
        # (a job begun again keeps its first begin's reply: no ride)
        if rides is not None and j.ridden is riders.NOT_RIDDEN:
            ride = riders.ride(rides, keys, j.id, j.token, j.args, j.kwargs, request, j.due_ms)
            if ride is not None:
                # (folded as it is made: a batch's calls wait for its round trip together)
                folded = carried.begin_starting(call, ride)
                if folded is None:
                    after.append((i, ride))
                else:
                    call = folded
                    folded_at.append(i)
        calls.append(call)
    try:
        replies = run_many_direct([*calls, *(ride for _, ride in after)])
        replied = time.monotonic()
    except DelayQueueError as exc:
        logger.error(
            "batch of %s jobs on %s not run: no start recorded (%s)", len(jobs), queue, exc
        )
        return []
    for (i, _), reply in zip(after, replies[len(calls) :], strict=True):
        jobs[i].ridden = reply
    for i in folded_at:  # (begun, ridden), or the error its begin met
        if isinstance(replies[i], DelayQueueError):
            jobs[i].ridden = replies[i]
        else:
            replies[i], jobs[i].ridden = replies[i]
    del replies[len(calls) :]
    runnable = []
    for job, began in zip(jobs, replies, strict=True):
        if isinstance(began, DelayQueueError):
            logger.error(
                "job %s on %s not run: its start was not recorded (%s)", job.id, queue, began
            )
        elif began.expired:
            bury_expired(keys, queue, job.id)
        elif began.limited_until is not None:
            pass  # back to scheduled, reported by the call
        elif not began.run:
            logger.warning(
                "job %s on %s: stale dispatch (token %s), not run", job.id, queue, job.token
            )
        else:
            job.attempt, job.begun_us, job.replied = began.attempt, began.now_us, replied
            job.rated = began.rated
            if began.rated and began.now_us is not None and began.counted_ms is not None:
                # (Redis's clock: the instant counted is `ahead` s after the begin ran)
                ahead = max(0.0, (began.counted_ms * 1000 - began.now_us) / 1e6)
                job.start_by, job.horizon = replied + ahead + RATE_SLACK, ahead > RATE_SLACK
            runnable.append(job)
    return runnable
