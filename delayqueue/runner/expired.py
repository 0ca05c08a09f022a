"""A dispatch whose job expired before the Celery side could start it (begin.lua said so):
the task does not run, and the job goes to dead with the reason "expired" (docs/limits.md)."""

from __future__ import annotations

import logging

from delayqueue import signals
from delayqueue.engine.execution import run
from delayqueue.engine.keys import QueueKeys
from delayqueue.errors import DelayQueueError
from delayqueue.observability import reported

logger = logging.getLogger("delayqueue.runner.job")


def bury_expired(keys: QueueKeys, queue: str, job_id: str, task: str | None = None) -> None:
    """Move job ``job_id``, which expired before it started, to dead. When Redis cannot be
    told, the job stays in flight: reaped, then found expired by the next claim."""
    try:
        run(reported.expire(signals.SENDER_CELERY_WORKER, keys, job_id, task), strict=False)
    except DelayQueueError as exc:
        logger.error(
            "job %s on %s expired, not run; not yet moved to dead (%s)", job_id, queue, exc
        )
