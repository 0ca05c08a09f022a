"""Schedule rules (delayqueue.periodic.rules): cron lines across real daylight saving changes,
``every`` anchored to the epoch, missed occurrences, words, fingerprints and refusals.

Pure: the clock is the instant each call is given, never the time of day."""

from __future__ import annotations

import cProfile
import functools
import math
import pstats
from datetime import date, datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from delayqueue.errors import InvalidOption
from delayqueue.periodic.rules import (
    MISSED_COUNT_LIMIT,
    CronRule,
    Rule,
    missed_between,
    parse_rule,
    to_datetime,
    to_ms,
    upcoming,
)
from tests.support.fuzzing import examples

MINUTE = 60_000
HOUR = 60 * MINUTE


def at(zone: str, wall: str, fold: int = 0) -> int:
    """The instant (epoch ms) the wall clock in ``zone`` shows ``wall`` ("2026-03-29 03:00");
    ``fold=1`` is the second time of a repeated one."""
    return to_ms(datetime.fromisoformat(wall).replace(tzinfo=ZoneInfo(zone), fold=fold))


def local(zone: str, instant_ms: int) -> str:
    """An instant as the wall clock in ``zone`` shows it, with its offset."""
    return to_datetime(instant_ms).astimezone(ZoneInfo(zone)).isoformat(" ", "minutes")


def local_wall(zone: str, instant_ms: int) -> datetime:
    """An instant as the wall clock in ``zone`` shows it (naive)."""
    return to_datetime(instant_ms).astimezone(ZoneInfo(zone)).replace(tzinfo=None)


def on_day(rule: Rule, day: str) -> list[str]:
    """The occurrences whose local date is ``day``, as local times."""
    zone = rule.timezone
    start = at(zone, f"{day} 00:00") - 1
    found: list[str] = []
    for occurrence in rule.occurrences_after(start):
        if local(zone, occurrence)[:10] != day:
            return found
        found.append(local(zone, occurrence))
    raise AssertionError("no end")


def between(rule: Rule, start: int, end: int) -> list[int]:
    """The occurrences in (start, end]."""
    found: list[int] = []
    for occurrence in rule.occurrences_after(start):
        if occurrence > end:
            return found
        found.append(occurrence)
    raise AssertionError("no end")


def matching_minutes(zone: str, start_ms: int, end_ms: int, minutes: set[int]) -> list[int]:
    """Brute force: every real minute in (start, end] whose wall clock shows one of
    ``minutes`` (what a wildcard-hour cron line must fire at)."""
    tz = ZoneInfo(zone)
    first = start_ms // MINUTE + 1
    return [
        minute * MINUTE
        for minute in range(first, end_ms // MINUTE + 1)
        if to_datetime(minute * MINUTE).astimezone(tz).minute in minutes
    ]


# The real changes of 2026, each with a wall time it skips and one it repeats.
SPRING = [
    ("Europe/Berlin", "2026-03-29"),  # 02:00 -> 03:00
    ("America/New_York", "2026-03-08"),  # 02:00 -> 03:00
    ("Australia/Lord_Howe", "2026-10-04"),  # 02:00 -> 02:30
]
FALL = [
    ("Europe/Berlin", "2026-10-25"),  # 03:00 -> 02:00
    ("America/New_York", "2026-11-01"),  # 02:00 -> 01:00
    ("Australia/Lord_Howe", "2026-04-05"),  # 02:00 -> 01:30
]


# ---- fixed-time lines: once a day, through both changes -------------------------------------


@pytest.mark.parametrize(
    ("zone", "day", "cron", "runs"),
    [
        ("Europe/Berlin", "2026-03-29", "30 2 * * *", ["2026-03-29 03:00+02:00"]),
        ("Europe/Berlin", "2026-03-29", "0 2 * * *", ["2026-03-29 03:00+02:00"]),
        ("Europe/Berlin", "2026-03-29", "0,30 2 * * *", ["2026-03-29 03:00+02:00"]),
        ("Europe/Berlin", "2026-03-29", "59 2 * * *", ["2026-03-29 03:00+02:00"]),
        ("America/New_York", "2026-03-08", "30 2 * * *", ["2026-03-08 03:00-04:00"]),
        ("Australia/Lord_Howe", "2026-10-04", "15 2 * * *", ["2026-10-04 02:30+11:00"]),
        ("Australia/Lord_Howe", "2026-10-04", "0 2 * * *", ["2026-10-04 02:30+11:00"]),
    ],
)
def test_a_time_the_spring_change_skips_runs_once_at_the_change(
    zone: str, day: str, cron: str, runs: list[str]
) -> None:
    rule = parse_rule(cron=cron, timezone=zone)
    assert on_day(rule, day) == runs
    day_before = (date.fromisoformat(day) - timedelta(days=1)).isoformat()
    assert len(on_day(rule, day_before)) == len(cron.split()[0].split(","))  # as written


def test_times_in_the_gap_and_after_it_run_once_each() -> None:
    rule = parse_rule(cron="30 2,3 * * *", timezone="Europe/Berlin")
    assert on_day(rule, "2026-03-29") == ["2026-03-29 03:00+02:00", "2026-03-29 03:30+02:00"]


@pytest.mark.parametrize(
    ("zone", "day", "cron", "runs"),
    [
        ("Europe/Berlin", "2026-10-25", "30 2 * * *", ["2026-10-25 02:30+02:00"]),
        ("Europe/Berlin", "2026-10-25", "0 2 * * *", ["2026-10-25 02:00+02:00"]),
        ("America/New_York", "2026-11-01", "30 1 * * *", ["2026-11-01 01:30-04:00"]),
        ("Australia/Lord_Howe", "2026-04-05", "45 1 * * *", ["2026-04-05 01:45+11:00"]),
        ("Australia/Lord_Howe", "2026-04-05", "30 1 * * *", ["2026-04-05 01:30+11:00"]),
    ],
)
def test_a_time_the_fall_change_repeats_runs_once_the_first_time(
    zone: str, day: str, cron: str, runs: list[str]
) -> None:
    rule = parse_rule(cron=cron, timezone=zone)
    assert on_day(rule, day) == runs


@pytest.mark.parametrize(
    ("zone", "cron", "asked", "fold", "next_run"),
    [
        # asked during the repeated hour's second pass: the first pass has run it
        ("Europe/Berlin", "30 2 * * *", "2026-10-25 02:10", 1, "2026-10-26 02:30+01:00"),
        ("Europe/Berlin", "30 2 * * *", "2026-10-25 02:40", 0, "2026-10-26 02:30+01:00"),
        ("Europe/Berlin", "30 2 * * *", "2026-10-25 02:20", 0, "2026-10-25 02:30+02:00"),
        ("Europe/Berlin", "0 3 * * *", "2026-10-25 02:10", 1, "2026-10-25 03:00+01:00"),
        ("America/New_York", "30 1 * * *", "2026-11-01 01:10", 1, "2026-11-02 01:30-05:00"),
        ("Australia/Lord_Howe", "45 1 * * *", "2026-04-05 01:35", 1, "2026-04-06 01:45+10:30"),
    ],
)
def test_asked_inside_a_repeated_hour_a_fixed_time_is_strictly_later(
    zone: str, cron: str, asked: str, fold: int, next_run: str
) -> None:
    rule = parse_rule(cron=cron, timezone=zone)
    instant = at(zone, asked, fold)
    assert local(zone, rule.next_after(instant)) == next_run
    assert rule.next_after(instant) > instant


@pytest.mark.parametrize(("zone", "day"), SPRING + FALL)
def test_a_daily_0600_keeps_0600_local_on_both_sides_of_a_change(zone: str, day: str) -> None:
    rule = parse_rule(cron="0 6 * * *", timezone=zone)
    start = at(zone, f"{day} 00:00") - 3 * 24 * HOUR
    runs = [to_datetime(run).astimezone(ZoneInfo(zone)) for run in upcoming(rule, start, 6)]
    assert [run.strftime("%H:%M") for run in runs] == ["06:00"] * 6
    days = [run.date() for run in runs]
    assert days == [days[0] + timedelta(days=n) for n in range(6)]
    assert date.fromisoformat(day) in days
    assert len({run.utcoffset() for run in runs}) == 2  # the change is among them


# ---- wildcard lines keep their hours ---------------------------------------------------------


@pytest.mark.parametrize(("zone", "day"), SPRING + FALL)
@pytest.mark.parametrize(("cron", "minutes"), [("0 * * * *", {0}), ("*/30 * * * *", {0, 30})])
def test_a_wildcard_line_fires_at_every_real_hour_or_half_hour(
    zone: str, day: str, cron: str, minutes: set[int]
) -> None:
    rule = parse_rule(cron=cron, timezone=zone)
    start, end = at(zone, f"{day} 00:00") - 1, at(zone, f"{day} 06:00")
    runs = between(rule, start, end)
    assert runs == matching_minutes(zone, start, end, minutes)
    assert len(set(runs)) == len(runs)
    step = HOUR if cron.startswith("0 ") else 30 * MINUTE
    gaps = {later - earlier for earlier, later in zip(runs, runs[1:], strict=False)}
    # A whole-hour change moves no hour's minute 0 or 30; Lord Howe's 30-minute one leaves
    # 90 real minutes between two whole hours (01:00 -> 02:00 at fall, 01:00 -> 03:00 at
    # spring), and keeps every half hour 30 minutes apart.
    if zone == "Australia/Lord_Howe" and step == HOUR:
        assert gaps == {HOUR, 90 * MINUTE}
    else:
        assert gaps == {step}


@pytest.mark.parametrize(
    ("zone", "day", "cron", "around"),
    [
        ("Europe/Berlin", "2026-10-25", "0 * * * *",
         "01:00+02:00 02:00+02:00 02:00+01:00 03:00+01:00"),
        ("Europe/Berlin", "2026-03-29", "0 * * * *",
         "00:00+01:00 01:00+01:00 03:00+02:00 04:00+02:00"),
        ("America/New_York", "2026-11-01", "0 * * * *",
         "00:00-04:00 01:00-04:00 01:00-05:00 02:00-05:00"),
        ("America/New_York", "2026-03-08", "0 * * * *",
         "00:00-05:00 01:00-05:00 03:00-04:00 04:00-04:00"),
        ("Australia/Lord_Howe", "2026-04-05", "*/30 * * * *",
         "01:00+11:00 01:30+11:00 01:30+10:30 02:00+10:30"),
        ("Australia/Lord_Howe", "2026-10-04", "*/30 * * * *",
         "01:00+10:30 01:30+10:30 02:30+11:00 03:00+11:00"),
        ("Australia/Lord_Howe", "2026-10-04", "0 * * * *",
         "00:00+10:30 01:00+10:30 03:00+11:00 04:00+11:00"),
    ],
)  # fmt: skip
def test_a_wildcard_line_at_the_change(zone: str, day: str, cron: str, around: str) -> None:
    rule = parse_rule(cron=cron, timezone=zone)
    start = at(zone, f"{day} {around[:5]}") - 1
    assert " ".join(local(zone, run)[11:] for run in upcoming(rule, start, 4)) == around


@pytest.mark.parametrize(("zone", "day"), SPRING + FALL)
@pytest.mark.parametrize(
    ("cron", "minutes"),
    [("0 * * * *", {0}), ("30 * * * *", {30}), ("*/15 * * * *", {0, 15, 30, 45}),
     ("*/7 * * * *", set(range(0, 60, 7)))],
)  # fmt: skip
def test_a_wildcard_line_asked_at_any_instant_of_a_change_day(
    zone: str, day: str, cron: str, minutes: set[int]
) -> None:
    """From every minute (and just before and after it) of the night of the change, the
    next occurrence is the next real minute whose wall clock matches."""
    rule = parse_rule(cron=cron, timezone=zone)
    start = at(zone, f"{day} 00:00")
    expected = matching_minutes(zone, start - HOUR, start + 8 * HOUR, minutes)
    for asked in range(start, start + 6 * HOUR, MINUTE):
        for instant in (asked - 1, asked, asked + 17_000):
            assert rule.next_after(instant) == next(at for at in expected if at > instant), local(
                zone, instant
            )


# ---- every: anchored to the epoch -------------------------------------------------------------


def test_every_is_anchored_to_the_epoch_in_utc() -> None:
    noon = at("UTC", "2026-01-01 12:00")
    assert parse_rule(every=60).next_after(noon + 30_000) == noon + MINUTE
    assert parse_rule(every=timedelta(minutes=5)).next_after(noon + 1) == noon + 5 * MINUTE
    assert upcoming(parse_rule(every=90), 0, 3) == [90_000, 180_000, 270_000]
    assert upcoming(parse_rule(every=1.5), 0, 2) == [1500, 3000]
    lord_howe = parse_rule(every=3600, timezone="Australia/Lord_Howe")  # whole hours of UTC
    assert lord_howe.timezone == "Australia/Lord_Howe"
    assert upcoming(lord_howe, noon, 3) == upcoming(parse_rule(every=3600), noon, 3)
    assert local("Australia/Lord_Howe", lord_howe.next_after(noon)) == "2026-01-02 00:00+11:00"
    july = at("UTC", "2026-07-01 12:00")  # +10:30 in the southern winter: at half past
    assert local("Australia/Lord_Howe", lord_howe.next_after(july)) == "2026-07-01 23:30+10:30"
    assert parse_rule(every=60).timezone == "UTC"


@pytest.mark.parametrize("rule", [parse_rule(every=60), parse_rule(cron="*/5 * * * *")])
def test_next_after_is_strictly_after(rule: Rule) -> None:
    occurrence = at("UTC", "2026-05-01 10:05")
    assert rule.next_after(occurrence - 1) == occurrence
    assert rule.next_after(occurrence) > occurrence
    assert rule.next_after(occurrence) == rule.next_after(occurrence + 1)
    assert parse_rule(every=60).next_after(-1) == 0  # before the epoch too


def test_upcoming() -> None:
    rule = parse_rule(cron="0 6 * * *", timezone="Europe/Berlin")
    runs = upcoming(rule, at("Europe/Berlin", "2026-10-24 07:00"), 3)
    assert [local("Europe/Berlin", run) for run in runs] == [
        "2026-10-25 06:00+01:00",
        "2026-10-26 06:00+01:00",
        "2026-10-27 06:00+01:00",
    ]
    assert upcoming(rule, 0, 0) == []


def test_upcoming_jumps_to_each_occurrence_rather_than_walking_the_clock() -> None:
    # Counted in Python calls, not timed: the same on any machine at any load. Walking
    # minute by minute to a daily rule's next five runs would take thousands of steps.
    now = at("UTC", "2026-06-01 12:34")
    for rule in [
        parse_rule(cron="0 6 * * *", timezone="Europe/Berlin"),
        parse_rule(cron="*/15 * * * *", timezone="Australia/Lord_Howe"),
        parse_rule(cron="0 9-17 * * MON-FRI", timezone="America/New_York"),
        parse_rule(every=300),
    ]:
        upcoming(rule, now, 5)  # (imports and caches warmed)
        profile = cProfile.Profile()
        profile.runcall(upcoming, rule, now, 5)
        calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
        assert calls < 1000, (rule.written, calls)


# ---- missed occurrences ------------------------------------------------------------------------


@pytest.mark.parametrize("rule", [parse_rule(every=60), parse_rule(cron="* * * * *")])
def test_missed_between_counts_and_keeps_the_latest(rule: Rule) -> None:
    last = at("UTC", "2026-05-01 10:00")
    latest, total = missed_between(rule, last, last + 10 * MINUTE, 3)
    assert total == 10  # (last, now]: not 10:00, but 10:10
    assert latest == [last + 8 * MINUTE, last + 9 * MINUTE, last + 10 * MINUTE]
    assert missed_between(rule, last, last + 10 * MINUTE - 1, 100) == (
        [last + minute * MINUTE for minute in range(1, 10)],
        9,
    )
    assert missed_between(rule, last, last + 10 * MINUTE, 0) == ([], 10)
    assert missed_between(rule, last, last, 5) == ([], 0)
    assert missed_between(rule, last, last - HOUR, 5) == ([], 0)
    assert missed_between(rule, last, last + 30_000, 5) == ([], 0)


@pytest.mark.parametrize("rule", [parse_rule(every=60), parse_rule(cron="* * * * *")])
def test_missed_between_stops_counting_at_its_limit(rule: Rule) -> None:
    last = at("UTC", "2026-05-01 10:00")
    now = last + 30 * 24 * HOUR + 30_000  # 43,200 minutes
    latest, total = missed_between(rule, last, now, 3)
    assert total == MISSED_COUNT_LIMIT
    assert latest == [now - 30_000 - 2 * MINUTE, now - 30_000 - MINUTE, now - 30_000]
    exactly = last + MISSED_COUNT_LIMIT * MINUTE
    assert missed_between(rule, last, exactly, 2) == (
        [exactly - MINUTE, exactly],
        MISSED_COUNT_LIMIT,
    )


def test_missed_between_across_a_fall_change_counts_both_hours() -> None:
    rule = parse_rule(cron="0 * * * *", timezone="Europe/Berlin")
    last = at("Europe/Berlin", "2026-10-25 00:30")
    latest, total = missed_between(rule, last, at("Europe/Berlin", "2026-10-25 04:00"), 10)
    assert total == 5  # 01:00, 02:00 +02:00, 02:00 +01:00, 03:00, 04:00
    assert [local("Europe/Berlin", run)[11:] for run in latest][1:3] == [
        "02:00+02:00",
        "02:00+01:00",
    ]


def test_missed_between_refuses_a_negative_limit() -> None:
    with pytest.raises(ValueError, match="limit"):
        missed_between(parse_rule(every=60), 0, MINUTE, -1)


# ---- words, as written, fingerprints ----------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "words"),
    [
        (parse_rule(cron="0 6 * * *", timezone="Europe/Berlin"),
         "at 06:00 every day (Europe/Berlin)"),
        (parse_rule(cron="@hourly"), "at the start of every hour (UTC)"),
        (parse_rule(cron="30 2 * * 0", timezone="America/New_York"),
         "at 02:30 on Sunday (America/New_York)"),
        (parse_rule(every=300), "every 5 minutes"),
        (parse_rule(every=60), "every minute"),
        (parse_rule(every=1), "every second"),
        (parse_rule(every=1.5), "every 1.5 seconds"),
        (parse_rule(every=90), "every 90 seconds"),
        (parse_rule(every=timedelta(hours=2)), "every 2 hours"),
        (parse_rule(every=86400, timezone="Europe/Berlin"), "every day"),
    ],
)  # fmt: skip
def test_describe(rule: Rule, words: str) -> None:
    assert rule.describe() == words


def test_written_is_the_rule_as_given() -> None:
    assert parse_rule(cron="0 6 * * mon", timezone="Europe/Berlin").written == "0 6 * * mon"
    assert parse_rule(cron="@daily").written == "@daily"
    assert parse_rule(every=300).written == "every 300 s"
    assert parse_rule(every=timedelta(minutes=5)).written == "every 300 s"
    assert parse_rule(every=1.5).written == "every 1.5 s"


def test_nicknames_are_their_lines() -> None:
    for nickname, line in [("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"),
                           ("@midnight", "0 0 * * *"), ("@weekly", "0 0 * * 0"),
                           ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"),
                           ("@annually", "0 0 1 1 *"), ("@DAILY", "0 0 * * *")]:  # fmt: skip
        rule = parse_rule(cron=nickname, timezone="Europe/Berlin")
        assert isinstance(rule, CronRule) and rule.expression == line
        same = parse_rule(cron=line, timezone="Europe/Berlin")
        assert upcoming(rule, 0, 3) == upcoming(same, 0, 3)
        assert rule.fixed_time == (nickname != "@hourly")  # @hourly keeps its hours


def test_fingerprint_changes_with_the_rule_or_timezone_only() -> None:
    berlin = parse_rule(cron="0 6 * * MON", timezone="Europe/Berlin")
    assert berlin.fingerprint() == "26d4ccd0aad4463d"  # stored in Redis: changing it re-plans
    for same in [
        parse_rule(cron="0 6 * * MON", timezone="Europe/Berlin"),
        parse_rule(cron="0  6 * * mon ", timezone="Europe/Berlin"),
    ]:
        assert same.fingerprint() == berlin.fingerprint()
    assert parse_rule(cron="@daily").fingerprint() == parse_rule(cron="0 0 * * *").fingerprint()
    others = [
        parse_rule(cron="0 7 * * MON", timezone="Europe/Berlin"),
        parse_rule(cron="0 6 * * MON", timezone="Europe/Paris"),
        parse_rule(cron="0 6 * * MON"),
        parse_rule(every=60),
        parse_rule(every=61),
        parse_rule(every=60, timezone="Europe/Berlin"),
    ]
    prints = {rule.fingerprint() for rule in [berlin, *others]}
    assert len(prints) == 1 + len(others)
    assert all(len(p) == 16 and int(p, 16) >= 0 for p in prints)
    assert (
        parse_rule(every=60).fingerprint() == parse_rule(every=timedelta(seconds=60)).fingerprint()
    )


# ---- refusals -----------------------------------------------------------------------------------


def test_exactly_one_of_cron_or_every() -> None:
    with pytest.raises(InvalidOption, match="exactly one of cron or every, not both"):
        parse_rule(cron="* * * * *", every=60)
    with pytest.raises(InvalidOption, match="exactly one of cron or every, not neither"):
        parse_rule()
    with pytest.raises(InvalidOption, match="not neither"):
        parse_rule(timezone="Europe/Berlin")


@pytest.mark.parametrize(
    "cron",
    ["61 * * * *", "0 6 * *", "* * * * * *", "0 0 1 1 * 2026", "@reboot", "", "every day",
     "0 25 * * *", "0 0 30 2 *", "* * */20 * 1L", "0 6 * * FUNDAY", "x" * 300, "0 6 * * 8"],
)  # fmt: skip
def test_a_bad_cron_line_is_refused_by_name(cron: str) -> None:
    with pytest.raises(InvalidOption, match="cron") as refused:
        parse_rule(cron=cron)
    assert repr(cron)[:40] in str(refused.value)


@pytest.mark.parametrize("cron", [42, b"0 6 * * *", ["0", "6", "*", "*", "*"]])
def test_a_cron_line_that_is_not_a_str_is_refused(cron: object) -> None:
    with pytest.raises(InvalidOption, match="cron must be a str"):
        parse_rule(cron=cron)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "zone",
    ["Mars/Olympus_Mons", "", "Europe", "../etc/passwd", "/etc/localtime", "localtime",
     "Europe/Berlin ", "zone.tab", 5],
)  # fmt: skip
def test_an_unknown_timezone_is_refused_by_name(zone: object) -> None:
    with pytest.raises(InvalidOption, match="timezone") as refused:
        parse_rule(cron="0 6 * * *", timezone=zone)  # type: ignore[arg-type]
    assert repr(zone)[:40] in str(refused.value)
    with pytest.raises(InvalidOption, match="timezone"):
        parse_rule(every=60, timezone=zone)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "every",
    [0, -1, 0.5, 0.0004, -math.inf, math.inf, math.nan, 366 * 86400 + 1, 10**400, True,
     "60", timedelta(0), timedelta(milliseconds=999), timedelta(days=367),
     -timedelta(minutes=1)],
)  # fmt: skip
def test_a_bad_every_is_refused_by_name(every: object) -> None:
    with pytest.raises(InvalidOption, match="every") as refused:
        parse_rule(every=every)  # type: ignore[arg-type]
    assert str(every)[:20] in str(refused.value) or repr(every)[:20] in str(refused.value)


def test_every_bounds_are_accepted() -> None:
    assert upcoming(parse_rule(every=1), 0, 1) == [1000]
    assert parse_rule(every=366 * 86400).next_after(0) == 366 * 86400 * 1000
    assert parse_rule(every=timedelta(days=366)).written == f"every {366 * 86400} s"


def test_an_instant_must_be_an_int() -> None:
    for rule in [parse_rule(every=60), parse_rule(cron="* * * * *")]:
        with pytest.raises(TypeError, match="epoch ms"):
            rule.next_after(1.5)  # type: ignore[arg-type]


# ---- properties ---------------------------------------------------------------------------------

ZONES = [
    "UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Europe/London",
    "America/Santiago", "America/Havana", "Pacific/Chatham", "Asia/Kolkata",
    "America/St_Johns", "Africa/Casablanca", "Asia/Gaza", "Pacific/Auckland",
]  # fmt: skip
FIRST, LAST = at("UTC", "2020-01-01 00:00"), at("UTC", "2035-12-31 00:00")
# Minute fields, and the minutes of the hour each matches.
MINUTE_FIELDS = {
    "*": set(range(60)),
    "*/5": set(range(0, 60, 5)),
    "*/7": set(range(0, 60, 7)),
    "*/30": {0, 30},
    "7": {7},
    "30": {30},
    "0,45": {0, 45},
}
HOUR_FIELDS = ["*", "*/2", "*/3", "1-3", "2", "0,12"]
DAY_FIELDS = ["* * *", "* * 0", "1 * *", "L * *", "* * MON-FRI", "29 2 *"]


@functools.cache
def offset_changes(zone: str) -> list[int]:
    """Brute force: the instants from FIRST to LAST at which ``zone`` changes its UTC offset
    (a probe a day, then a bisection to the second)."""
    tz = ZoneInfo(zone)

    def offset(ms: int) -> timedelta | None:
        return to_datetime(ms).astimezone(tz).utcoffset()

    changes = []
    for day in range(FIRST, LAST, 24 * HOUR):
        if offset(day) != offset(day + 24 * HOUR):
            low, high = day // 1000, (day + 24 * HOUR) // 1000
            while high - low > 1:
                middle = (low + high) // 2
                low, high = (
                    (middle, high) if offset(middle * 1000) == offset(day) else (low, middle)
                )
            changes.append(high * 1000)
    return changes


def instants(zone: str) -> st.SearchStrategy[int]:
    """Any instant from 2020 to 2035, or (as often) one within 3 hours of an offset change."""
    anywhere = st.integers(FIRST, LAST)
    if not offset_changes(zone):
        return anywhere
    near_a_change = st.sampled_from(offset_changes(zone)).flatmap(
        lambda change: st.integers(change - 3 * HOUR, change + 3 * HOUR)
    )
    return st.one_of(anywhere, near_a_change)


@st.composite
def rules_and_instants(draw: st.DrawFn) -> tuple[Rule, int]:
    zone = draw(st.sampled_from(ZONES))
    if draw(st.booleans()):
        rule = parse_rule(every=draw(st.integers(1, 7 * 86400)), timezone=zone)
    else:
        minute, hour = (
            draw(st.sampled_from(sorted(MINUTE_FIELDS))),
            draw(st.sampled_from(HOUR_FIELDS)),
        )
        rule = parse_rule(
            cron=f"{minute} {hour} {draw(st.sampled_from(DAY_FIELDS))}", timezone=zone
        )
    return rule, draw(instants(zone))


@pytest.mark.fuzz
@settings(max_examples=examples(200))
@given(rule_and_instant=rules_and_instants())
def test_occurrences_strictly_increase_with_no_duplicate(
    rule_and_instant: tuple[Rule, int],
) -> None:
    rule, instant = rule_and_instant
    chain = [instant]
    for _ in range(12):
        chain.append(rule.next_after(chain[-1]))
    assert all(earlier < later for earlier, later in zip(chain, chain[1:], strict=False))
    assert upcoming(rule, instant, 12) == chain[1:]
    for occurrence in chain[1:]:  # asked just before an occurrence, it is the next one
        assert rule.next_after(occurrence - 1) == occurrence


@st.composite
def zones_and_instants(draw: st.DrawFn) -> tuple[str, int]:
    zone = draw(st.sampled_from(ZONES))
    return zone, draw(instants(zone))


@pytest.mark.fuzz
@settings(max_examples=examples(200))
@given(zone_and_instant=zones_and_instants(), minute=st.integers(0, 59), hour=st.integers(0, 23))
def test_a_fixed_time_daily_line_runs_once_every_local_day(
    zone_and_instant: tuple[str, int], minute: int, hour: int
) -> None:
    zone, instant = zone_and_instant
    rule = parse_rule(cron=f"{minute} {hour} * * *", timezone=zone)
    runs = [to_datetime(run).astimezone(ZoneInfo(zone)) for run in upcoming(rule, instant, 40)]
    days = [run.date() for run in runs]
    assert days == [days[0] + timedelta(days=n) for n in range(40)]
    for run in runs:  # at the time written, or at the end of the gap that skips it
        wall, wanted = run.replace(tzinfo=None), datetime.combine(run.date(), dtime(hour, minute))
        just_before = local_wall(zone, to_ms(run) - 1000)
        assert wall == wanted or just_before < wanted < wall, run


@pytest.mark.fuzz
@settings(max_examples=examples(200))
@given(zone_and_instant=zones_and_instants(), minute=st.sampled_from(sorted(MINUTE_FIELDS)))
def test_a_wildcard_line_fires_at_every_real_matching_minute(
    zone_and_instant: tuple[str, int], minute: str
) -> None:
    zone, instant = zone_and_instant
    rule = parse_rule(cron=f"{minute} * * * *", timezone=zone)
    runs = upcoming(rule, instant, 10)
    assert runs == matching_minutes(zone, instant, runs[-1], MINUTE_FIELDS[minute])
