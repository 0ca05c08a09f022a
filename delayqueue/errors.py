"""Exceptions raised by delayqueue, each at the call that caused it."""

from __future__ import annotations


class DelayQueueError(Exception):
    """Base class of every delayqueue error."""


class InvalidDelay(DelayQueueError, ValueError):
    """A delay or eta that is negative, not finite, naive, of the wrong type or too far away."""


class InvalidQueueName(DelayQueueError, ValueError):
    """A queue name outside ``[A-Za-z0-9_.-]{1,64}``."""


class NotSerializable(DelayQueueError, TypeError):
    """Arguments that cannot be stored as JSON."""


class PayloadTooLarge(DelayQueueError, ValueError):
    """Arguments whose JSON is larger than MAX_PAYLOAD_BYTES."""


class UnknownTask(DelayQueueError, LookupError):
    """A task name that no Celery app knows."""


class InvalidJobId(DelayQueueError, ValueError):
    """A string that is not a delayqueue job id."""


class RedisUnavailable(DelayQueueError, ConnectionError):
    """Redis did not answer (down, unreachable, paused or too slow). Retrying is safe."""


class CorruptJob(DelayQueueError):
    """A job found in Redis whose data is not what delayqueue writes."""
