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


class CorruptSchedule(DelayQueueError):
    """A periodic schedule found in Redis whose record is not what delayqueue writes: it
    cannot be acted on (resumed) until it is declared again or removed."""


class InvalidKey(DelayQueueError, ValueError):
    """A dedupe key that is not a non-empty str of valid Unicode, at most 200 characters."""


class InvalidOption(DelayQueueError, ValueError):
    """A task or call option (max_attempts, visibility_timeout, backoff, on_conflict, ...) that
    is of the wrong type or outside its bounds."""


class RedisError(DelayQueueError):
    """Redis answered with an error reply. The subclasses name the ones an operator can act
    on; this class itself is any other (a script refusing data, WRONGTYPE, ...)."""


class RedisOutOfMemory(RedisError):
    """Redis refused a write: ``maxmemory`` reached (OOM). Nothing was written."""


class RedisReadOnly(RedisError):
    """Redis refused a write: it is a read-only replica (READONLY), e.g. during a failover."""


class RedisPermissionDenied(RedisError):
    """The Redis user may not run this command or touch this key (NOPERM): see the ACL in
    docs/redis-acl.md."""


class RedisMisconfigured(RedisError):
    """Redis refused a write because it cannot persist (MISCONF: a failed RDB/AOF write)."""


class NotDurable(RedisError):
    """A durable write (``durable=True``, ``DURABLE``) reached the master, but fewer replicas
    than ``DURABLE_REPLICAS`` acknowledged it within ``DURABLE_TIMEOUT`` (Redis ``WAIT``).
    It is written: a failover before a replica copies it could lose it."""


class RedisLoading(RedisUnavailable):
    """Redis is loading its dataset into memory (LOADING). Retrying later is safe."""
