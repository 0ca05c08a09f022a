"""A job as the claim script gave it, checked: what the Celery side would refuse to run goes
to dead at once, with the reason, and so does a job the worker cannot send (``bury``)."""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import JOB_ID, queue_keys
from delayqueue.engine.record import describe_exception, utf8_safe
from delayqueue.errors import DelayQueueError, RedisUnavailable
from delayqueue.observability import reported
from delayqueue.signals import SENDER_DELAY_WORKER
from delayqueue.wire import valid_dispatch

logger = logging.getLogger("delayqueue.worker.dispatch")  # where these lines were always logged


@dataclass
class Claimed:
    queue: str
    id: str
    token: str
    attempt: int
    task: str
    args_json: str
    kwargs_json: str
    claimed_ms: int | None = None  # Redis's clock when the claim script ran
    due_ms: int | None = None  # the due time it was claimed at, when the claim reply has it
    trace: str = ""  # the trace context of its scheduling (integrations/trace_context.py)

    @property
    def lateness_ms(self) -> int | None:
        """Due -> claimed (the dispatch follows within the same pass), when both are known."""
        if self.due_ms is None or self.claimed_ms is None:
            return None
        return self.claimed_ms - self.due_ms


def decode_claimed(
    queue: str, raw: transitions.ClaimedJob, claimed_ms: int | None = None
) -> Claimed | None:
    """A claimed job from the script's bytes; one whose data is not UTF-8, or whose id or
    token the Celery side would refuse (``wire.valid_dispatch``), goes to dead.
    ``claimed_ms``: Redis's clock at the claim (the claim reply's ``now``)."""
    job_id, token, attempt = raw.id, raw.token, raw.attempt
    task, args_json, kwargs_json = raw.task, raw.args_json, raw.kwargs_json
    due = raw.due_ms
    try:
        job = Claimed(
            queue,
            job_id.decode(),
            str(int(token)),
            int(attempt),
            task.decode(),
            args_json.decode(),
            kwargs_json.decode(),
            claimed_ms,
            None if due is None else int(due),
            raw.trace.decode("utf-8", "replace") if raw.trace else "",  # (checked when read)
        )
        # What the Celery side would refuse to run, every time it is sent: to dead now,
        # with the real reason, not after MAX_NOT_STARTED dispatches as "never started".
        if JOB_ID.fullmatch(job.id) is None:
            reason = "corrupt job data: its id is not a delayqueue job id (a 26-character ULID)"
        elif not valid_dispatch(queue, job.id, job.token):
            reason = "corrupt job data: its fencing token has grown past 15 digits"
        else:
            return job
    except UnicodeDecodeError:
        reason = "corrupt job data: not UTF-8 text (delayqueue stores JSON only)"
    except (ValueError, TypeError) as exc:
        reason = f"corrupt job data: {describe(exc)}"
    bury(queue, job_id, reason)
    return None


def describe(exc: BaseException) -> str:
    return describe_exception(exc, 500)


def describe_current() -> str:
    exc = sys.exc_info()[1]
    return describe(exc) if exc is not None else "unknown error"


def bury(
    queue: str,
    job_id: str | bytes,
    reason: str,
    task: str | None = None,
    attempt: int | None = None,
) -> None:
    """Move a job that can never run to dead. An id that is not UTF-8 (found as bytes) goes
    through the bytes client, so its keys are the ones Redis holds."""
    keys = queue_keys(queue)
    reason = utf8_safe(reason)
    text_id = job_id.decode("utf-8", "backslashreplace") if isinstance(job_id, bytes) else job_id
    call = reported.bury(SENDER_DELAY_WORKER, keys, job_id, reason, task=task, attempt=attempt)
    try:
        buried = run(call, strict=False, as_bytes=isinstance(job_id, bytes))
    except RedisUnavailable:
        raise
    except DelayQueueError as exc:
        # The queue's own keys are broken (a dedupe hash of another type...): this job stays
        # where it is, said at ERROR, and the pass goes on with the others.
        logger.error("job %r on %s could not be buried (%s): %s", text_id, queue, reason, exc)
        return
    if not buried:
        logger.warning("job %r on %s: not buried (%s): no longer there", job_id, queue, reason)
