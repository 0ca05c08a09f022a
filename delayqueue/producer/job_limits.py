"""A job's limits and expiry, from its task's options and its call's (the call's expiry
wins), as enqueue.lua takes them (engine/limits.py; docs/limits.md)."""

from __future__ import annotations

from datetime import timedelta

from delayqueue.engine.limits import Limits, limits_arg
from delayqueue.errors import InvalidOption
from delayqueue.validators import check_expires, check_limit_key


def job_limits(
    task: str,
    limits: Limits | None,
    expires_ms: int | None,
    limit_key: str | None,
    expires: float | timedelta | None,
) -> str:
    if limit_key is not None:
        check_limit_key(limit_key)
        if not limits:
            raise InvalidOption(
                f"limit_key={limit_key!r} was given, but task {task!r} has no rate or "
                "concurrency for it to apply to (@delayed_task(rate=..., concurrency=...))"
            )
    if expires is not None:
        expires_ms = check_expires(expires)
    return limits_arg(limits, limit_key or "", expires_ms)
