"""Stored values as the admin shows them, whatever Redis holds, and what every read-only
query shares.

The admin reads job data as bytes (``engine.clients.get_raw_redis()``) and turns every value
into text here: bytes that are not UTF-8 are shown with backslash escapes, huge values are cut,
numbers that are not numbers become None, and any score (nan, inf, 1e300, before year 1,
after year 9999) is shown as a time when it is one and as what it is when it is not. A key of
the wrong type is read as empty, with a note that says so (``engine.reads.Reads``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import dateformat, timezone

from delayqueue.engine.decode import integer as integer

DETAIL_CHARS = 100_000  # most characters of one stored value a page shows
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TEN_THOUSAND_YEARS_S = 10_000 * 365.25 * 86400
_CROCKFORD = {c: i for i, c in enumerate("0123456789ABCDEFGHJKMNPQRSTVWXYZ")}


def text(value: bytes | str | None, limit: int | None = None) -> str:
    """A stored value as text: UTF-8, with any other byte as ``\\xNN``; at most ``limit``
    characters, and a note of how many more there were."""
    if value is None:
        return ""
    shown = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value
    if limit is not None and len(shown) > limit:
        return f"{shown[:limit]}… ({len(shown) - limit:,} more characters not shown)"
    return shown


def ulid_ms(job_id: str) -> int | None:
    """The creation time (epoch ms) in a ULID's first 10 characters."""
    try:
        return sum(_CROCKFORD[c] << (5 * (9 - i)) for i, c in enumerate(job_id[:10].upper()))
    except KeyError:
        return None


# ---- times ------------------------------------------------------------------------------


def _local(ms: float) -> tuple[datetime | None, bool]:
    """(the time in the current time zone, or in UTC when it has no local form; whether it
    is local), or (None, False) when ``ms`` is no time a datetime can hold."""
    try:
        moment = _EPOCH + timedelta(milliseconds=ms)
    except (OverflowError, ValueError):
        return None, False
    try:
        return timezone.localtime(moment), True
    except (OverflowError, ValueError, OSError):
        return moment, False


def _format(moment: datetime, pattern: str) -> str:
    try:
        return dateformat.format(moment, pattern)
    except (OverflowError, ValueError, OSError):
        return moment.isoformat(sep=" ")


def _score_text(ms: float) -> str:
    if not math.isfinite(ms):
        return f"not a time (score {ms})"
    where = "before year 1" if ms < 0 else "after year 9999"
    return f"{where} (score {ms:.6g})"


@dataclass(frozen=True)
class Moment:
    """A Redis time (epoch ms, any float a score can be) seen from Redis's "now"."""

    ms: float
    now_ms: int

    @property
    def local(self) -> datetime | None:
        """The time in the current time zone; None when it has none."""
        moment, is_local = _local(self.ms)
        return moment if is_local else None

    def _shown(self, pattern: str) -> str:
        moment, is_local = _local(self.ms)
        if moment is None:
            return _score_text(self.ms)
        shown = _format(moment, pattern)
        return shown if is_local else f"{shown} UTC"

    @property
    def shown(self) -> str:
        """``2026-11-23 14:05:09`` in the current time zone, or the best that can be said."""
        return self._shown("Y-m-d H:i:s")

    @property
    def zoned(self) -> str:
        return self._shown("Y-m-d H:i:s T").removesuffix(" UTC UTC").strip()

    @property
    def clock(self) -> str:
        return self._shown("H:i")

    @property
    def iso(self) -> str:
        """For ``<time datetime=...>``; empty when the score is no time."""
        moment, _ = _local(self.ms)
        return _format(moment, "c") if moment is not None else ""

    @property
    def relative(self) -> str:
        return relative_text(self.ms - self.now_ms)

    @property
    def past(self) -> bool:
        return self.ms <= self.now_ms


def relative_text(delta_ms: float) -> str:
    """``in 3 min`` / ``3 min ago`` / ``now``, for a signed distance from now."""
    if not math.isfinite(delta_ms):
        return ""
    seconds = abs(delta_ms) / 1000
    if seconds < 1:
        return "now"
    if seconds < 60:
        span = f"{int(seconds)} s"
    elif seconds < 3600:
        span = f"{int(seconds // 60)} min"
    elif seconds < 86400:
        hours, minutes = divmod(int(seconds // 60), 60)
        span = f"{hours} h {minutes} min" if minutes else f"{hours} h"
    elif seconds < _TEN_THOUSAND_YEARS_S:
        days = int(seconds // 86400)
        span = f"{days} day{'s' if days != 1 else ''}"
    else:
        span = "over 10,000 years"
    return f"in {span}" if delta_ms > 0 else f"{span} ago"
