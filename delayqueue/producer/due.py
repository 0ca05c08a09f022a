"""Turning delays and due times into what the enqueue and reschedule scripts take."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta
from typing import Literal

from delayqueue.conf import get_settings
from delayqueue.errors import InvalidDelay
from delayqueue.validators import shown

Mode = Literal["delay", "at"]


def delay_seconds(
    *,
    seconds: float | None = None,
    minutes: float | None = None,
    hours: float | None = None,
    days: float | None = None,
    delta: timedelta | None = None,
) -> float | timedelta:
    """Exactly one of the keyword delays, as seconds or a timedelta."""
    if minutes is None and hours is None and days is None and delta is None:
        if type(seconds) is int or type(seconds) is float:  # the usual seconds=N, at once
            return seconds
    given = {
        name: value
        for name, value in (
            ("seconds", seconds),
            ("minutes", minutes),
            ("hours", hours),
            ("days", days),
            ("delta", delta),
        )
        if value is not None
    }
    if len(given) != 1:
        raise InvalidDelay(
            "give exactly one of seconds=, minutes=, hours=, days= or delta= "
            f"(got {', '.join(given) or 'none'})"
        )
    ((name, value),) = given.items()
    if name == "delta":
        return value  # checked by to_due()
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidDelay(f"{name}= must be a number, not {type(value).__name__}")
    factor = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}[name]
    return value * factor


def to_due(delay: float | timedelta | None, eta: datetime | None) -> tuple[Mode, int]:
    """("delay", ms from Redis's now) or ("at", epoch ms), checked against MAX_DELAY."""
    max_delay = float(get_settings().max_delay)
    if type(delay) is int and eta is None and 0 <= delay <= max_delay:  # whole seconds
        return "delay", delay * 1000
    if (delay is None) == (eta is None):
        raise InvalidDelay("give either a delay or an eta, not both and not neither")
    if eta is not None:
        if not isinstance(eta, datetime):
            raise InvalidDelay(f"eta must be a datetime, not {type(eta).__name__}")
        if is_naive(eta, "eta"):
            raise InvalidDelay(
                f"eta {eta.isoformat()} is naive; pass an aware datetime "
                "(django.utils.timezone.now() + timedelta(...))"
            )
        # Aware subtraction works on ordinals: no timestamp() of a date near year 1 or 9999,
        # which overflows once the offset is applied.
        _check_ahead((eta - datetime.now(tz=UTC)).total_seconds(), max_delay, "eta")
        return "at", math.floor(eta.timestamp() * 1000)
    if isinstance(delay, timedelta):
        seconds = delay.total_seconds()
    elif isinstance(delay, bool) or not isinstance(delay, int | float):
        raise InvalidDelay(f"delay must be seconds or a timedelta, not {type(delay).__name__}")
    else:
        try:
            seconds = float(delay)
        except OverflowError:
            raise InvalidDelay(
                f"delay {shown(delay)} s is more than MAX_DELAY={max_delay:.0f} s"
            ) from None
    if not math.isfinite(seconds):
        raise InvalidDelay(f"delay {seconds!r} is not a finite number of seconds")
    if seconds < 0:
        raise InvalidDelay(f"delay {seconds!r} s is negative; a job cannot be due in the past")
    if seconds > max_delay:
        raise InvalidDelay(f"delay {seconds:.0f} s is more than MAX_DELAY={max_delay:.0f} s")
    return "delay", math.ceil(seconds * 1000)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def is_naive(moment: datetime, what: str) -> bool:
    """Whether ``moment`` has no UTC offset; InvalidDelay naming it (``what``) when its
    tzinfo cannot say (a ``utcoffset()`` that raises or returns nonsense)."""
    try:
        return moment.tzinfo is None or moment.utcoffset() is None
    except Exception as exc:
        raise InvalidDelay(
            f"{what}'s time zone {shown(moment.tzinfo)} has no valid offset: {exc}"
        ) from None


def due_at(moment: datetime, what: str) -> tuple[Mode, int]:
    """("at", epoch ms) of an aware ``moment`` that a caller has checked is one, rounded up
    to its millisecond, so the job never runs before it (``to_due`` rounds an eta down),
    checked against MAX_DELAY as an eta is; ``what`` names it in the error. Exact: integer
    arithmetic on the datetime, no float timestamp."""
    ms = -((_EPOCH - moment) // _MS)
    _check_ahead(ms / 1000 - time.time(), float(get_settings().max_delay), what)
    return "at", ms


def _check_ahead(ahead: float, max_delay: float, what: str) -> None:
    """InvalidDelay for a due time more than MAX_DELAY away, either way (``ahead`` s)."""
    if ahead > max_delay:
        raise InvalidDelay(f"{what} is {ahead:.0f} s away, more than MAX_DELAY={max_delay:.0f} s")
    if ahead < -max_delay:
        raise InvalidDelay(
            f"{what} is {-ahead:.0f} s in the past, more than MAX_DELAY={max_delay:.0f} s; "
            "a job due that long ago is a mistake (one due in the recent past runs at once)"
        )
