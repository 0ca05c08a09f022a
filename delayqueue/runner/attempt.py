"""One attempt of a job on the Celery side, the same whether the job came in a message of
its own (``runner.run_job``) or in a batch (``batches.run_batch``): wait for its due time,
report that it started, run it, then settle it: ack it and report the success, or record
the failure (a retry with backoff, or dead) and report that.

How the settling calls reach Redis is the caller's (``Settle``): a job of its own message
sends each at once; a batch sends its jobs' in one round trip at its end.
"""

from __future__ import annotations

import logging
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from delayqueue import signals
from delayqueue.conf import get_settings
from delayqueue.engine import transitions
from delayqueue.engine.execution import run, run_direct
from delayqueue.engine.keys import QueueKeys
from delayqueue.engine.record import describe_exception, utf8_safe
from delayqueue.errors import DelayQueueError
from delayqueue.observability import events, reported
from delayqueue.runner.observed import around_attempt
from delayqueue.validators import BACKOFF_MAX_SECONDS, MAX_DISPATCH_AHEAD

logger = logging.getLogger("delayqueue.runner.job")

Backoff = float | Callable[[int], float]


class Attempt(NamedTuple):
    """One begun dispatch of a job, ready to run (a tuple: one per job, built fast)."""

    keys: QueueKeys
    queue: str
    job_id: str
    token: str
    task: str
    number: int  # the attempt's number, from its begin
    due_ms: int | None  # when known: it waits for it (DISPATCH_AHEAD), and lateness is from it
    claimed_ms: int | None
    begun_us: int | None  # Redis's clock as begin ran (µs)
    replied: float  # time.monotonic() of begin's reply
    trace: str = ""  # the trace context its dispatch carried (integrations/trace_context.py)


class Settle(Protocol):
    def add(
        self, call: transitions.ScriptCall[Any], report: Callable[[Any], None], unsent: str
    ) -> None:
        """Send ``call`` (now or later), then ``report(reply)``; the reply is the
        DelayQueueError it met when it could not be recorded. ``unsent``: what that means
        for the job, for a log line."""


class SettleNow:
    """Each call sent at once (a job of its own message); one that could not be recorded
    is logged with what that means."""

    def add(
        self, call: transitions.ScriptCall[Any], report: Callable[[Any], None], unsent: str
    ) -> None:
        try:
            # (strict=False: under DURABLE, a replica slow to acknowledge is a warning)
            reply = run_direct(call, strict=False) if call.resend_safe else run(call, strict=False)
        except DelayQueueError as exc:
            logger.error("%s (%s)", unsent, exc)
            reply = exc
        report(reply)


@dataclass
class Outcome:
    succeeded: bool
    result: Any = None
    raised: Exception | None = None


def run_attempt(
    attempt: Attempt, call: Callable[[], Any], backoff: Backoff | None, settle: Settle
) -> Outcome:
    """Run one attempt and hand its settling call to ``settle``."""
    queue, job_id, task, number = attempt.queue, attempt.job_id, attempt.task, attempt.number
    # Spans and monitors (docs/tracing.md) before the hold: what deciding them costs is
    # paid while the job waits for its due time, not after it (both begin at ``call``).
    call, settle = around_attempt(attempt, call, settle)
    hold_until_due(attempt.due_ms, attempt.begun_us, attempt.replied)
    if signals.job_started.receivers or events.logger.isEnabledFor(logging.DEBUG):
        now_ms = time.time_ns() // 1_000_000
        events.started(
            queue,
            job_id,
            task,
            number,
            None if attempt.due_ms is None else now_ms - attempt.due_ms,
            None if attempt.claimed_ms is None else now_ms - attempt.claimed_ms,
        )
    began = time.monotonic()
    try:
        result = call()
    except Exception as exc:
        runtime = time.monotonic() - began
        fail = failure_call(
            attempt.keys, job_id, attempt.token, number, exc, backoff, task=task, runtime=runtime
        )
        settle.add(*fail, f"job {job_id} on {queue} failed and the failure could not be recorded")
        return Outcome(False, raised=exc)
    runtime = time.monotonic() - began
    # Not raised when it fails: the task itself succeeded. The job stays in flight and is
    # reaped and run again after its visibility timeout (at least once).
    settle.add(
        *reported.ack(
            attempt.keys, job_id, attempt.token, task=task, attempt=number, runtime=runtime
        ),
        f"job {job_id} on {queue} ran but its ack failed; it will run again",
    )
    return Outcome(True, result=result)


def hold_until_due(due_ms: int | None, begun_us: int | None, replied: float) -> None:
    """Wait for the due time of a job the delay worker claimed ahead of it (DISPATCH_AHEAD):
    begun already, it starts on time rather than a hop later. ``begun_us`` is Redis's clock
    as ``begin`` ran (microseconds), ``replied`` the ``time.monotonic()`` its reply arrived:
    Redis read its clock before that, so the job never starts before its due time by Redis's
    clock, whatever this host's clock says. At most MAX_DISPATCH_AHEAD, whatever a header
    says."""
    if due_ms is None or begun_us is None or due_ms * 1000 <= begun_us:
        return
    ahead = min((due_ms * 1000 - begun_us) / 1e6, MAX_DISPATCH_AHEAD)
    wait = ahead - (time.monotonic() - replied)
    if wait > 0:
        time.sleep(wait)


def failure_call(
    keys: QueueKeys,
    job_id: str,
    token: str,
    attempt: int,
    exc: Exception,
    backoff: Backoff | None,
    *,
    task: str,
    runtime: float,
) -> reported.Settling:
    """The fail call that records a failed attempt, and what reports it."""
    config = get_settings()
    error = utf8_safe(describe_exception(exc, 2000))
    try:
        trace = "".join(traceback.format_exception(exc))[-20000:]
    except Exception:  # an exception whose __str__ raises
        trace = error
    trace = utf8_safe(trace)
    return reported.fail(
        keys,
        job_id,
        token,
        backoff_ms=backoff_ms(attempt, backoff),
        error=error,
        traceback=trace,
        max_attempts=config.max_attempts,
        dead_max=config.dead_max,
        task=task,
        attempt=attempt,
        runtime=runtime,
        exception=exc,
    )


def backoff_ms(attempt: int, backoff: Backoff | None) -> int:
    """Delay before the next attempt: exponential from BACKOFF_BASE, capped, with jitter."""
    config = get_settings()
    if callable(backoff):
        try:
            seconds = float(backoff(attempt))
        except Exception:
            logger.exception("backoff(%s) raised; using the default backoff", attempt)
            return backoff_ms(attempt, None)
        if not 0 <= seconds <= BACKOFF_MAX_SECONDS:  # nan, inf, negative, absurd
            logger.error("backoff(%s) gave %r seconds; using the default backoff", attempt, seconds)
            return backoff_ms(attempt, None)
        return int(seconds * 1000)
    base = float(backoff if backoff is not None else config.backoff_base)
    seconds = min(float(config.backoff_max), base * 2 ** max(0, attempt - 1))
    jitter = float(config.backoff_jitter)
    return max(0, int(seconds * random.uniform(1 - jitter, 1 + jitter) * 1000))
