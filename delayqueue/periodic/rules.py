"""When a schedule's occurrences fall: a cron line in an IANA timezone, or a fixed period.

Instants are ints of epoch milliseconds (UTC) and every function here is pure: all delay
workers asking for the occurrence after the same instant get the same answer, which is what
lets any of them move a schedule on.

``every`` rules are anchored to the Unix epoch, not to when a worker started: their
occurrences are the whole multiples of the period since 1970-01-01 00:00 UTC (``every=60``
fires at each whole minute of UTC, ``every=3600`` at each whole hour of UTC, ``every=90`` at
:00:00 and :01:30 ...), whatever the timezone.

Cron lines (five fields, or ``@hourly`` ... ``@yearly``) are parsed and matched by cronsim on
naive wall-clock datetimes; what a wall-clock time means as an instant across a daylight
saving change is decided here, as Debian's cron decides it:

- A *fixed-time* line, neither of whose minute and hour fields starts with ``*``
  (``30 2 * * *``, ``0 9-17 * * 1-5``, ``@daily``), runs once per matching wall-clock time.
  A time that a spring-forward change skips runs at the change, the first instant the clock
  is past it; a time that a fall-back change repeats runs the first time only.
- A *wildcard* line (``0 * * * *``, ``*/15 * * * *``, ``@hourly``) runs at every real instant
  whose wall clock matches: at a fall-back both 02:00s run; at a spring-forward the skipped
  02:00 does not exist and does not run.

cronsim applies the same rules to aware datetimes, but not safely enough to use (2.8): a
wildcard line skips an occurrence at a 30-minute change (Australia/Lord_Howe, ``30 * * * *``
after 01:30:17+11:00 on 2026-04-05 gives 02:30+10:30, not 01:30+10:30), and a fixed-time line
asked from the second pass of a repeated hour can return an instant before the one asked.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import count, islice, takewhile
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from delayqueue.errors import InvalidOption
from delayqueue.validators import shown

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MS = timedelta(milliseconds=1)
EVERY_MIN_MS = 1000
EVERY_MAX_MS = 366 * 24 * 3600 * 1000
CRON_MAX_CHARS = 200
# missed_between counts occurrences up to this many, no further.
MISSED_COUNT_LIMIT = 10_000
# The UTC offset is probed at this step to find where it changes: since 1970 no zone in
# tzdata has changed it twice within 6 days (two changes between probes would be missed).
OFFSET_PROBE = timedelta(days=1)
# Vixie/Debian cron's nicknames (@reboot is not a schedule).
NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Names that load but are no one zone: the machine's own, and tzdata's POSIX template.
NOT_ZONES = {"localtime", "posixrules"}


def checked_instant(instant_ms: int) -> int:
    """``instant_ms`` if it is an int (epoch ms); TypeError if not."""
    if isinstance(instant_ms, bool) or not isinstance(instant_ms, int):
        raise TypeError(f"an instant is an int of epoch ms, not {shown(instant_ms)}")
    return instant_ms


def to_datetime(instant_ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=checked_instant(instant_ms))


def to_ms(instant: datetime) -> int:
    return (instant - EPOCH) // ONE_MS


class Rule(ABC):
    """When a schedule's occurrences fall. ``written`` is the rule as the user wrote it,
    ``timezone`` the IANA name its cron fields are read in ("UTC" unless given)."""

    written: str
    timezone: str

    @abstractmethod
    def occurrences_after(self, instant_ms: int) -> Iterator[int]:
        """The occurrences strictly after ``instant_ms``, in increasing order, without end."""

    @abstractmethod
    def describe(self) -> str:
        """The rule in words: "at 06:00 every day (Europe/Berlin)", "every 5 minutes"."""

    @abstractmethod
    def canonical(self) -> str:
        """The rule in one form however it was written (``@daily`` is ``0 0 * * *``)."""

    def next_after(self, instant_ms: int) -> int:
        """The first occurrence strictly after ``instant_ms``."""
        for occurrence in self.occurrences_after(instant_ms):
            return occurrence
        raise InvalidOption(f"{self.written!r} has no occurrence after {instant_ms} ms")

    def fingerprint(self) -> str:
        """16 hex digits that change when the rule or its timezone does, and only then."""
        text = f"{self.canonical()}\n{self.timezone}"
        return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]

    def between(self, after_ms: int, until_ms: int, limit: int) -> tuple[list[int], int]:
        """See ``missed_between``."""
        latest: deque[int] = deque(maxlen=limit)
        total = 0
        for occurrence in self.occurrences_after(after_ms):
            if occurrence > until_ms:
                return list(latest), total
            if total == MISSED_COUNT_LIMIT:
                break
            total += 1
            latest.append(occurrence)
        else:
            return list(latest), total
        # Too many to count: the latest ones are in a window that ends at until_ms, doubled
        # until it holds ``limit`` of them.
        window_ms = 3_600_000
        while True:
            start = max(after_ms, until_ms - window_ms)
            latest.clear()
            latest.extend(takewhile(lambda at: at <= until_ms, self.occurrences_after(start)))
            if len(latest) == limit or start == after_ms:
                return list(latest), total
            window_ms *= 2


@dataclass(frozen=True)
class EveryRule(Rule):
    """Every ``period_ms``, at the whole multiples of it since the epoch (UTC)."""

    period_ms: int
    timezone: str = "UTC"

    @property
    def written(self) -> str:  # type: ignore[override]
        seconds = self.period_ms // 1000 if self.period_ms % 1000 == 0 else self.period_ms / 1000
        return f"every {seconds} s"

    def occurrences_after(self, instant_ms: int) -> Iterator[int]:
        first = checked_instant(instant_ms) // self.period_ms + 1
        return (index * self.period_ms for index in count(first))

    def between(self, after_ms: int, until_ms: int, limit: int) -> tuple[list[int], int]:
        first, last = after_ms // self.period_ms + 1, until_ms // self.period_ms
        latest = [index * self.period_ms for index in range(max(first, last - limit + 1), last + 1)]
        return latest, min(last - first + 1, MISSED_COUNT_LIMIT)

    def describe(self) -> str:
        for unit, unit_ms in (("day", 86_400_000), ("hour", 3_600_000), ("minute", 60_000)):
            if self.period_ms % unit_ms == 0:
                number = self.period_ms // unit_ms
                return f"every {unit}" if number == 1 else f"every {number} {unit}s"
        seconds = self.written.removeprefix("every ").removesuffix(" s")
        return "every second" if seconds == "1" else f"every {seconds} seconds"

    def canonical(self) -> str:
        return f"every {self.period_ms} ms"


@dataclass(frozen=True)
class CronRule(Rule):
    """A five-field cron line (``expression``: upper case, single spaces) read in ``zone``."""

    written: str
    timezone: str
    expression: str
    zone: ZoneInfo = field(compare=False, repr=False)

    @property
    def fixed_time(self) -> bool:
        """Debian cron's "job that runs at a specific time" (see the module docstring)."""
        minute, hour = self.expression.split()[:2]
        return not minute.startswith("*") and not hour.startswith("*")

    def occurrences_after(self, instant_ms: int) -> Iterator[int]:
        start = to_datetime(instant_ms)
        found = self._fixed_time_after(start) if self.fixed_time else self._wildcard_after(start)
        return (to_ms(instant) for instant in found)

    def _fixed_time_after(self, start: datetime) -> Iterator[datetime]:
        last = start
        for wall in CronSim(self.expression, _wall(start, self.zone)):
            instant = _first_instant_at(wall, self.zone)
            if instant > last:  # not: a repeated hour's second pass, a gap's second time
                last = instant
                yield instant

    def _wildcard_after(self, start: datetime) -> Iterator[datetime]:
        # Where the UTC offset holds, the wall clock is the instant plus the offset.
        since, offset = start, _offset(start, self.zone)
        walls = CronSim(self.expression, _wall(start, self.zone))
        while (wall := next(walls, None)) is not None:
            instant = (wall - offset).replace(tzinfo=UTC)
            change = _offset_change(self.zone, since, instant, offset)
            if change is None:
                since = instant
                yield instant
            else:  # match again from the change on, with the offset after it
                since, offset = change, _offset(change, self.zone)
                walls = CronSim(self.expression, _wall(change, self.zone) - timedelta(seconds=1))

    def describe(self) -> str:
        words = CronSim(self.expression, datetime(2000, 1, 1)).explain()
        return f"{words[:1].lower()}{words[1:]} ({self.timezone})"

    def canonical(self) -> str:
        return f"cron {self.expression}"


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    return instant.astimezone(zone).utcoffset() or timedelta(0)


def _first_instant_at(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant the wall clock shows ``wall``, or if it never does (a gap), the
    first instant it is past it: the end of the gap."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if _wall(first, zone) == wall:
        return first
    # In a gap, fold=0 reads the wall time with the offset before the change (an instant
    # after the change) and fold=1 with the offset after it (an instant before).
    before = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return _first_second(before, first, lambda instant: _wall(instant, zone) > wall)


def _offset_change(
    zone: ZoneInfo, since: datetime, until: datetime, offset: timedelta
) -> datetime | None:
    """The first instant in (since, until] whose UTC offset is not ``offset``, if any."""
    probe = since
    while probe < until:
        step = min(probe + OFFSET_PROBE, until)
        if _offset(step, zone) != offset:
            return _first_second(probe, step, lambda instant: _offset(instant, zone) != offset)
        probe = step
    return None


def _first_second(after: datetime, until: datetime, test: Callable[[datetime], bool]) -> datetime:
    """The first whole second in (after, until] where ``test`` holds, by bisection: it holds
    at ``until``, from its first second on (time changes fall on whole seconds)."""
    low, high = to_ms(after) // 1000, -(-to_ms(until) // 1000)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if test(EPOCH + timedelta(seconds=middle)) else (middle, high)
    return EPOCH + timedelta(seconds=high)


def parse_rule(
    *,
    cron: str | None = None,
    every: float | int | timedelta | None = None,
    timezone: str | None = None,
) -> Rule:
    """The rule of ``cron`` (five fields or a nickname, read in ``timezone``) or of ``every``
    (seconds or a timedelta, from 1 s to 366 days, anchored to the epoch): exactly one of
    them. ``timezone`` is an IANA name, UTC by default. InvalidOption, naming the value, if
    anything is wrong."""
    if (cron is None) == (every is None):
        given = "both" if cron is not None else "neither"
        raise InvalidOption(f"a schedule takes exactly one of cron or every, not {given}")
    zone_name = "UTC" if timezone is None else timezone
    zone = _zone(zone_name)
    if cron is None:
        return EveryRule(period_ms=_period_ms(every), timezone=zone_name)
    return CronRule(written=cron, timezone=zone_name, expression=_expression(cron), zone=zone)


def _zone(name: Any) -> ZoneInfo:
    if not isinstance(name, str):
        raise InvalidOption(f"timezone must be an IANA name (a str), not {shown(name)}")
    try:
        if name not in NOT_ZONES:
            return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        pass
    raise InvalidOption(f"timezone {shown(name)} is not an IANA name (as 'Europe/Berlin', 'UTC')")


def _period_ms(every: Any) -> int:
    if isinstance(every, timedelta):
        period_ms = round(every / ONE_MS)
    elif isinstance(every, int | float) and not isinstance(every, bool):
        try:
            period_ms = round(every * 1000)
        except (OverflowError, ValueError):  # inf, nan
            raise InvalidOption(f"every must be a finite number, not {every}") from None
    else:
        raise InvalidOption(
            f"every must be seconds (an int or float) or a timedelta, not "
            f"{type(every).__name__} {shown(every)}"
        )
    if not EVERY_MIN_MS <= period_ms <= EVERY_MAX_MS:
        raise InvalidOption(f"every must be from 1 second to 366 days, not {shown(every)}")
    return period_ms


def _expression(cron: Any) -> str:
    if not isinstance(cron, str):
        raise InvalidOption(f"cron must be a str, not {type(cron).__name__} {shown(cron)}")
    fields = NICKNAMES.get(cron.strip().lower(), cron).upper().split()
    if len(cron) > CRON_MAX_CHARS or len(fields) != 5:
        raise InvalidOption(
            f"cron {shown(cron)} is not a cron line: five fields, minute hour day-of-month "
            f"month day-of-week (or @hourly, @daily, @weekly, @monthly, @yearly)"
        )
    expression = " ".join(fields)
    try:
        next(CronSim(expression, datetime(2000, 1, 1)))
    except CronSimError as exc:
        raise InvalidOption(f"cron {shown(cron)} is not a valid cron line: {exc}") from None
    except StopIteration:
        raise InvalidOption(f"cron {shown(cron)} matches no date (in 50 years)") from None
    return expression


def upcoming(rule: Rule, after_ms: int, count: int) -> list[int]:
    """The first ``count`` occurrences strictly after ``after_ms``."""
    return list(islice(rule.occurrences_after(after_ms), count))


def missed_between(rule: Rule, last_ms: int, now_ms: int, limit: int) -> tuple[list[int], int]:
    """The occurrences in (``last_ms``, ``now_ms``]: the latest ``limit`` of them, in order,
    and how many there were in all, counted up to MISSED_COUNT_LIMIT (which then means at
    least that many)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int of 0 or more, not {shown(limit)}")
    if now_ms <= last_ms:
        return [], 0
    return rule.between(last_ms, now_ms, limit)
