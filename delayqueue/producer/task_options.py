"""The options of ``@delayed_task``, checked when the decorator is applied (a bad one is
refused there, before the task exists), as the task attributes that carry them."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from delayqueue.engine.keys import check_queue_name
from delayqueue.engine.limits import Limits
from delayqueue.errors import InvalidOption
from delayqueue.runner.attempt import Backoff
from delayqueue.validators import (
    check_backoff,
    check_concurrency,
    check_expires,
    check_flag,
    check_max_attempts,
    check_rate,
    check_shards,
    check_visibility_timeout,
)

MAX_BATCH = 1_000  # jobs in one batch message


def task_options(
    queue: str | None,
    max_attempts: int | None,
    backoff: Backoff | None,
    visibility_timeout: float | None,
    batch: int | None,
    durable: bool | None,
    shards: int | None,
) -> dict[str, Any]:
    if queue is not None:
        check_queue_name(queue)
    if max_attempts is not None:
        check_max_attempts(max_attempts)
    if visibility_timeout is not None:
        check_visibility_timeout(visibility_timeout)
    check_backoff(backoff)
    if durable is not None:
        check_flag(durable, "durable")
    if shards is not None:
        check_shards(shards)
    if batch is not None and (
        isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH
    ):
        raise InvalidOption(f"batch must be an integer from 1 to {MAX_BATCH}, not {batch!r}")
    return {
        "dq_queue": queue,
        "dq_max_attempts": max_attempts,
        "dq_backoff": staticmethod(backoff) if callable(backoff) else backoff,
        "dq_visibility_timeout": visibility_timeout,
        "dq_batch": batch,
        "dq_durable": durable,
        "dq_shards": shards,
    }


def checked_limits(
    rate: str | None, concurrency: int | None, expires: float | timedelta | None, where: str = ""
) -> tuple[Limits | None, int | None]:
    """``rate``, ``concurrency`` and ``expires`` checked, as the Limits and expiry ms jobs
    carry (``where``: the place they were given, for the error)."""
    prefix = f"{where}: " if where else ""
    n, window_ms = (0, 1_000) if rate is None else check_rate(rate, f"{prefix}rate")
    running = 0 if concurrency is None else check_concurrency(concurrency, f"{prefix}concurrency")
    expires_ms = None if expires is None else check_expires(expires, f"{prefix}expires")
    limits = Limits(n, window_ms, running)
    return (limits or None), expires_ms


def limit_options(
    rate: str | None, concurrency: int | None, expires: float | timedelta | None
) -> dict[str, Any]:
    limits, expires_ms = checked_limits(rate, concurrency, expires)
    return {"dq_limits": limits, "dq_expires_ms": expires_ms}
