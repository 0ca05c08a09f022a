"""The Celery side: finding tasks, and running a dispatched job so that it is acked only
when it finished (success -> ack, exception -> retry with backoff or dead)."""

from __future__ import annotations

import logging
import random
import time
import traceback
from collections.abc import Callable
from typing import Any

from celery import current_task

from delayqueue import events, signals
from delayqueue.conf import get_settings
from delayqueue.engine import transitions
from delayqueue.engine.execution import run, run_direct
from delayqueue.engine.keys import QueueKeys, queue_keys
from delayqueue.engine.record import describe_exception, utf8_safe
from delayqueue.errors import DelayQueueError
from delayqueue.validators import BACKOFF_MAX_SECONDS, MAX_DISPATCH_AHEAD, VISIBILITY_TIMEOUT_MAX
from delayqueue.wire import (
    HEADER_CLAIMED,
    HEADER_DUE,
    HEADER_VT,
    header_ms,
    valid_dispatch,
)

MAX_VISIBILITY_MS = int(VISIBILITY_TIMEOUT_MAX * 1000)

logger = logging.getLogger(__name__)

Backoff = float | Callable[[int], float]


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


def dispatch_visibility_ms(request: Any) -> int:
    """The visibility timeout a begin restarts the deadline from, for a job that sets none of
    its own: the dispatching delay worker's (HEADER_VT), else this side's setting."""
    sent = header_ms(request, HEADER_VT)
    if sent is not None and 1 <= sent <= MAX_VISIBILITY_MS:
        return sent
    return int(get_settings().visibility_timeout * 1000)


def _since_ms(request: Any, name: str, now_ms: int) -> int | None:
    then = header_ms(request, name)
    return None if then is None else now_ms - then


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


def _task_name(call: Callable[..., Any]) -> str:
    """The name of the task being run: ``call`` is a task object (a plain task run by
    delayqueue.run_task) or the ``run`` of the current task (a @delayed_task)."""
    name = getattr(call, "name", None)
    if isinstance(name, str):
        return name
    return str(getattr(current_task, "name", None) or getattr(call, "__qualname__", "?"))


def run_job(
    call: Callable[..., Any],
    args: tuple[Any, ...] | list[Any],
    kwargs: dict[str, Any],
    dispatch: tuple[str, str, str],
    *,
    backoff: Backoff | None = None,
) -> Any:
    """Run one dispatch of a job: skip it when its token is stale, ack it when ``call``
    returns, record the failure (retry or dead) when it raises, and re-raise."""
    queue, job_id, token = dispatch
    if not valid_dispatch(queue, job_id, token):
        logger.warning("not a delayqueue dispatch (headers %r), not run", (queue, job_id, token))
        return None
    keys = queue_keys(queue)
    request = getattr(current_task, "request", None)
    visibility_ms = dispatch_visibility_ms(request)
    # begin and ack are safe to resend (run_direct sends a call again on a connection Redis
    # dropped while it was idle): the second begin restarts the same deadline, the second
    # ack finds the job gone.
    try:
        # (strict=False: under DURABLE, a replica slow to acknowledge is a warning; the begin
        # is written, and the run must not be given up for it)
        begin = transitions.begin(keys, job_id, token, visibility_ms=visibility_ms)
        started = run_direct(begin, strict=False)
        replied = time.monotonic()
    except DelayQueueError as exc:
        # Redis down, or the queue's keys broken: the task does not run now, and the job,
        # still in flight, is reaped and dispatched again once Redis can say it may run.
        logger.error(
            "job %s on %s not run: its start could not be recorded (%s)", job_id, queue, exc
        )
        return None
    if not started.run:
        logger.warning("job %s on %s: stale dispatch (token %s), not run", job_id, queue, token)
        return None
    task = _task_name(call)
    attempt = started.attempt
    hold_until_due(header_ms(request, HEADER_DUE), started.now_us, replied)
    if signals.job_started.receivers or events.logger.isEnabledFor(logging.DEBUG):
        now_ms = time.time_ns() // 1_000_000
        events.started(
            queue,
            job_id,
            task,
            attempt,
            _since_ms(request, HEADER_DUE, now_ms),
            _since_ms(request, HEADER_CLAIMED, now_ms),
        )
    began = time.monotonic()
    try:
        result = call(*args, **kwargs)
    except Exception as exc:
        runtime = time.monotonic() - began
        outcome, error = _record_failure(keys, job_id, token, attempt, exc, backoff)
        events.failed(queue, job_id, task, attempt, runtime, exc, outcome, error)
        if outcome == "dead":
            events.dead(signals.SENDER_CELERY_WORKER, queue, job_id, error, "failed", task, attempt)
        raise
    runtime = time.monotonic() - began
    try:
        acked = run_direct(transitions.ack(keys, job_id, token), strict=False)
    except DelayQueueError as exc:
        # Not raised: the task itself succeeded. The job stays in flight and is reaped and
        # run again after its visibility timeout (at least once).
        logger.error(
            "job %s on %s ran but its ack failed; it will run again (%s)", job_id, queue, exc
        )
        return result
    events.succeeded(queue, job_id, task, attempt, runtime, acked)
    return result


def failure_call(
    keys: QueueKeys, job_id: str, token: str, attempt: int, exc: Exception, backoff: Backoff | None
) -> tuple[transitions.ScriptCall[transitions.FailOutcome], str]:
    """The fail call that records a failed attempt, and the error's summary."""
    config = get_settings()
    error = utf8_safe(describe_exception(exc, 2000))
    try:
        trace = "".join(traceback.format_exception(exc))[-20000:]
    except Exception:  # an exception whose __str__ raises
        trace = error
    trace = utf8_safe(trace)
    call = transitions.fail(
        keys,
        job_id,
        token,
        backoff_ms=backoff_ms(attempt, backoff),
        error=error,
        traceback=trace,
        max_attempts=config.max_attempts,
        dead_max=config.dead_max,
    )
    return call, error


def _record_failure(
    keys: QueueKeys, job_id: str, token: str, attempt: int, exc: Exception, backoff: Backoff | None
) -> tuple[transitions.FailOutcome | None, str]:
    """Record a failed attempt: (the fail script's outcome, or None when it could not be
    recorded; the error's summary)."""
    call, error = failure_call(keys, job_id, token, attempt, exc, backoff)
    try:
        return run(call, strict=False), error
    except DelayQueueError:
        logger.exception("job %s failed and the failure could not be recorded", job_id)
        return None, error
