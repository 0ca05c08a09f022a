"""Redis's errors as delayqueue's: connection failures as RedisUnavailable, error replies
as RedisError subclasses an operator can act on, the URL in every message redacted."""

from __future__ import annotations

from typing import Any

import redis
from redis.exceptions import AskError, ClusterError, RedisClusterException, TryAgainError

from delayqueue.conf import get_settings
from delayqueue.errors import (
    DelayQueueError,
    RedisError,
    RedisLoading,
    RedisMisconfigured,
    RedisOutOfMemory,
    RedisPermissionDenied,
    RedisReadOnly,
    RedisUnavailable,
)
from delayqueue.redaction import redact_url


class _RedisErrors:
    """``with redis_errors():`` turns redis-py's errors into delayqueue's: connection and
    timeout errors into RedisUnavailable, error replies into RedisError subclasses (see
    ``translate``). (A class, not @contextmanager: it wraps every call to Redis.)"""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if isinstance(exc, redis.RedisError | RedisClusterException):
            raise translate(exc) from exc


_REDIS_ERRORS = _RedisErrors()


def redis_errors() -> _RedisErrors:
    return _REDIS_ERRORS


def as_delayqueue_error(exc: BaseException) -> DelayQueueError | None:
    """``exc`` as a DelayQueueError when it is one or an error of the Redis client that
    escaped ``redis_errors()``; None for anything else."""
    if isinstance(exc, DelayQueueError):
        return exc
    if isinstance(exc, redis.RedisError | RedisClusterException):
        return translate(exc)
    return None


# Error reply prefixes an operator can act on, and what delayqueue raises for each.
_REPLY_ERRORS: dict[str, type[DelayQueueError]] = {
    "OOM": RedisOutOfMemory,
    "READONLY": RedisReadOnly,
    "NOPERM": RedisPermissionDenied,
    "MISCONF": RedisMisconfigured,
    "LOADING": RedisLoading,
}


def translate(exc: BaseException) -> DelayQueueError:
    """The DelayQueueError for an error redis-py raised or a pipeline returned."""
    if isinstance(exc, DelayQueueError):
        return exc
    text = str(exc)
    # A script's error reply starts with the script's own words; the code is the first word
    # of redis's reply (redis-py strips it for the classes it knows).
    for code, error in _REPLY_ERRORS.items():
        if text.startswith(code) or isinstance(exc, _KNOWN.get(code, ())):
            return error(f"Redis at {safe_url()} refused the command ({code}): {text}")
    if "can't run this command" in text or "no permissions to access" in text:
        return RedisPermissionDenied(f"Redis at {safe_url()} refused the command (NOPERM): {text}")
    # A cluster without a master for a slot (mid-failover), a slot still moving when the
    # client's redirections ran out ("TTL exhausted"), or one the client cannot reach or
    # map, is as unavailable as a single Redis that does not answer: retrying is safe.
    unavailable = (
        redis.ConnectionError,
        redis.TimeoutError,
        OSError,
        RedisClusterException,
        ClusterError,
        TryAgainError,
        AskError,  # MOVED or ASK left unfollowed: the command did not run
    )
    if isinstance(exc, unavailable):
        return RedisUnavailable(
            f"Redis at {safe_url()} did not answer ({text}); nothing was changed if the "
            "call raised before Redis replied, and retrying is safe"
        )
    return RedisError(f"Redis at {safe_url()} answered with an error: {text}")


_KNOWN: dict[str, type[BaseException] | tuple[type[BaseException], ...]] = {
    "OOM": redis.exceptions.OutOfMemoryError,
    "READONLY": redis.exceptions.ReadOnlyError,
    "NOPERM": redis.exceptions.NoPermissionError,
    "LOADING": redis.exceptions.BusyLoadingError,
}


def safe_url() -> str:
    return redact_url(str(get_settings().redis_url))
