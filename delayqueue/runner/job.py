"""The Celery side, a job in a message of its own: begin its dispatch (a stale one is not
run), then run the attempt (``attempt.py``: acked only when it finished; an exception is
recorded as a retry with backoff or dead, and raised again). A task with rides
(``riders.py``) sends its calls in the begin's round trip and in the ack's or fail's."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from celery import current_task

from delayqueue.conf import get_settings
from delayqueue.engine.execution import run_direct
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import DelayQueueError
from delayqueue.integrations import trace_context
from delayqueue.observability import reported
from delayqueue.runner import riders
from delayqueue.runner.attempt import Attempt, Backoff, SettleNow, run_attempt
from delayqueue.runner.expired import bury_expired
from delayqueue.validators import VISIBILITY_TIMEOUT_MAX
from delayqueue.wire import (
    HEADER_CLAIMED,
    HEADER_DUE,
    HEADER_VT,
    header_ms,
    valid_dispatch,
)

MAX_VISIBILITY_MS = int(VISIBILITY_TIMEOUT_MAX * 1000)

logger = logging.getLogger(__name__)


def dispatch_visibility_ms(request: Any) -> int:
    """The visibility timeout a begin restarts the deadline from, for a job that sets none of
    its own: the dispatching delay worker's (HEADER_VT), else this side's setting."""
    sent = header_ms(request, HEADER_VT)
    if sent is not None and 1 <= sent <= MAX_VISIBILITY_MS:
        return sent
    return int(get_settings().visibility_timeout * 1000)


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
    due_ms = header_ms(request, HEADER_DUE)
    rides = riders.of(call)
    ridden = riders.NOT_RIDDEN
    # begin and ack are safe to resend (run_direct sends a call again on a connection Redis
    # dropped while it was idle): the second begin restarts the same deadline, the second
    # ack finds the job gone.
    try:
        # (strict=False: under DURABLE, a replica slow to acknowledge is a warning; the begin
        # is written, and the run must not be given up for it)
        begin = reported.begin(keys, job_id, token, visibility_ms=visibility_ms)
        ride = None
        if rides is not None:
            ride = riders.ride(rides, keys, job_id, token, args, kwargs, request, due_ms)
        if ride is None:
            started = run_direct(begin, strict=False)
        else:
            started, ridden = riders.begin_with(begin, ride)
        replied = time.monotonic()
    except DelayQueueError as exc:
        # Redis down, or the queue's keys broken: the task does not run now, and the job,
        # still in flight, is reaped and dispatched again once Redis can say it may run.
        logger.error(
            "job %s on %s not run: its start could not be recorded (%s)", job_id, queue, exc
        )
        return None
    if started.expired:
        bury_expired(keys, queue, job_id, _task_name(call))
        return None
    if started.limited_until is not None:  # (back to scheduled, reported by the call)
        return None
    if not started.run:
        logger.warning("job %s on %s: stale dispatch (token %s), not run", job_id, queue, token)
        return None
    attempt = Attempt(
        keys,
        queue,
        job_id,
        token,
        _task_name(call),
        started.attempt,
        due_ms=due_ms,
        claimed_ms=header_ms(request, HEADER_CLAIMED),
        begun_us=started.now_us,
        replied=replied,
        trace=trace_context.from_request(request),
    )
    if rides is None:
        outcome = run_attempt(attempt, lambda: call(*args, **kwargs), backoff, SettleNow())
    else:
        together = riders.SettleTogether()
        with riders.running(job_id, ridden, together):
            outcome = run_attempt(attempt, lambda: call(*args, **kwargs), backoff, together)
        together.send()
    if outcome.raised is not None:
        raise outcome.raised
    return outcome.result
