"""Hypothesis strategies for the fuzzing of the public API: delays, etas, queue names, options,
tasks and job ids, each odd (``ODD``) and valid (``VALID``)."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

from django.utils import timezone as dj_timezone
from hypothesis import strategies as st

from tests.support import jobs
from tests.support.api_values import ANY_ARGS, ANY_KWARGS, KWARG_NAMES, ODD_TEXT, TEXT, recipe

NUMBERS = st.one_of(
    st.sampled_from(
        [
            0,
            -0.0,
            0.0004,
            0.001,
            1,
            5.5,
            -1,
            -1e-9,
            math.nan,
            math.inf,
            -math.inf,
            1e300,
            1e18,
            2**53,
            31_536_000,
            31_536_001,
            True,
            False,
            1e-320,
        ]  # fmt: skip
    ),
    st.floats(),
    st.integers(min_value=-(10**20), max_value=10**20),
)
DELAYS = st.one_of(
    NUMBERS,
    st.sampled_from(
        [
            "5",
            b"5",
            Decimal("1"),
            Fraction(1, 3),
            [],
            1j,
            timedelta.max,
            timedelta.min,
            timedelta(0),
            timedelta(microseconds=1),
            timedelta(seconds=-1),
            timedelta(days=365),
            timedelta(days=366),
            datetime(2030, 1, 1, tzinfo=UTC),
        ]  # fmt: skip
    ),
    st.timedeltas(),
    st.sampled_from(
        [recipe("10**5000", lambda: 10**5000), recipe("-(10**400)", lambda: -(10**400))]
    ),
)
ZONES = [
    None,
    UTC,
    timezone(timedelta(hours=5)),
    timezone(timedelta(hours=-5)),
    timezone(timedelta(hours=23, minutes=59)),
    timezone(-timedelta(hours=23, minutes=59)),
    ZoneInfo("Asia/Kolkata"),
    ZoneInfo("America/New_York"),
    ZoneInfo("Pacific/Kiritimati"),
]
EDGE_DATETIMES = [
    datetime(1, 1, 1),
    datetime(1, 1, 1, 12),
    datetime(1, 1, 2),
    datetime(9999, 12, 31, 23, 59, 59, 999999),
    datetime(9999, 12, 31),
    datetime(1970, 1, 1),
    datetime(1969, 12, 31, 23, 59, 59),
]


def _make_aware(value: datetime, zone: ZoneInfo) -> Any:
    """Django's make_aware, or the error it raises, as a value to pass on."""
    try:
        return dj_timezone.make_aware(value, zone)
    except Exception as exc:  # a value the test cannot build is no call
        return exc


def _near_now(seconds: float, zone: Any) -> Any:
    try:
        return datetime.now(zone) + timedelta(seconds=seconds)
    except OverflowError as exc:
        return exc


ETAS = st.one_of(
    st.builds(
        lambda value, zone: value.replace(tzinfo=zone),
        st.one_of(st.sampled_from(EDGE_DATETIMES), st.datetimes()),
        st.sampled_from(ZONES),
    ),
    st.builds(
        _make_aware,
        st.sampled_from(EDGE_DATETIMES),
        st.sampled_from([ZoneInfo("Asia/Kolkata"), ZoneInfo("America/New_York")]),
    ).filter(lambda value: isinstance(value, datetime)),
    st.builds(
        _near_now,
        st.one_of(st.sampled_from([-1e6, -1, 0, 0.5, 60, 3e7, 3.2e7]), st.floats(-1e8, 1e8)),
        st.sampled_from(ZONES),
    ).filter(lambda value: isinstance(value, datetime)),
    st.sampled_from([date(2030, 1, 1), "2030-01-01T00:00:00Z", 0, 1e9, time(12), None]),
)
QUEUES = st.sampled_from(
    [
        None,
        "tests",
        ".",
        "..",
        "-",
        "_",
        "a" * 64,
        "a" * 65,
        "",
        " ",
        "a/b",
        "a b",
        "ü",
        "tests\n",
        "{x}",
        "a:b",
        5,
        b"tests",
        "k\ud800",
    ]  # fmt: skip
)
MAX_ATTEMPTS = st.sampled_from(
    [
        None,
        1,
        2,
        3,
        0,
        -1,
        True,
        False,
        1.0,
        1.5,
        "3",
        10**9,
        10**9 + 1,
        10**15,
        10**16,
        2**63,
        10**20,
        math.nan,
        recipe("10**5000", lambda: 10**5000),
    ]  # fmt: skip
)
VISIBILITY = st.sampled_from(
    [
        None,
        0.0004,
        0.001,
        0.0015,
        1,
        2.5,
        300,
        1e9,
        1e12,
        1e300,
        1e306,
        1e308,
        math.inf,
        -math.inf,
        math.nan,
        True,
        False,
        -1,
        0,
        "5",
        10**20,
        recipe("10**5000", lambda: 10**5000),
        timedelta(seconds=5),
    ]  # fmt: skip
)
ON_CONFLICT = st.sampled_from(
    ["keep", "replace", "KEEP", "Replace", "", None, 1, "keep\n", b"keep", ["keep"]]
)
KEYS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "k",
            "k\ud800",
            "\ud800",
            "",
            " k ",
            "k\n",
            "\n",
            "a" * 200,
            "a" * 201,
            "\x00\n",
            5,
            b"k",
            "é" * 200,
            "k/../x",
            "{k}",
        ]  # fmt: skip
    ),
    TEXT,
)
TASKS = st.sampled_from(
    [
        "record",
        "plain",
        "always_fails",
        "tests.support.jobs.record",
        "tests.support.jobs.plain",
        "delayqueue.run_task",
        "no.such.task",
        "",
        "a\nb",
        "tests.support.jobs.record\n",
        None,
        5,
        "record.run",
        "k\ud800",
    ]  # fmt: skip
)
DELAY_NAMES = st.dictionaries(
    st.sampled_from(["seconds", "minutes", "hours", "days", "delta"]), DELAYS, max_size=2
)
JOB_IDS = st.sampled_from(
    [
        "prior",
        "unknown",
        "prior-lower",
        "prior\n",
        "",
        "x",
        "01ARZ3NDEKTSV4RRFFQ69G5FA",
        None,
        5,
        "../../etc",
        "k\ud800",
    ]  # fmt: skip
)


# What each argument looks like when it is valid: a call draws a few of its arguments from
# the odd strategies above and the rest from these, so that the odd ones reach past the
# first check.
JSON_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from([t for t in ODD_TEXT if not any(0xD800 <= ord(c) <= 0xDFFF for c in t)]),
)
JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63),
        st.floats(allow_nan=False, allow_infinity=False),
        JSON_TEXT,
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(JSON_TEXT, inner, max_size=3)
    ),
    max_leaves=8,
)
VALID_ARGS = st.lists(JSON, max_size=3)
VALID_KWARGS = st.dictionaries(KWARG_NAMES.filter(lambda n: n.isidentifier()), JSON, max_size=2)
VALID_DELAYS = st.one_of(
    st.sampled_from([0, 0.0, 0.0004, 0.001, 1, 59.9, 3600, 31_536_000, timedelta(0)]),
    st.floats(min_value=0, max_value=1e6),
    st.integers(min_value=0, max_value=10**6),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=365)),
)
VALID_ETAS = st.builds(
    _near_now,
    st.one_of(st.sampled_from([-1e6, -1, 0, 0.5, 60, 3e7]), st.floats(-1e6, 3e7)),
    st.sampled_from(ZONES[1:]),
)
VALID = {
    "args": VALID_ARGS,
    "kwargs": VALID_KWARGS,
    "delay": VALID_DELAYS,
    "eta": VALID_ETAS,
    "delay names": st.builds(
        lambda name, value: {name: value},
        st.sampled_from(["seconds", "minutes", "hours", "days"]),
        st.sampled_from([0, 0.001, 0.5, 1]),
    )
    | st.builds(lambda value: {"delta": value}, st.timedeltas(timedelta(0), timedelta(days=1))),
    "queue": st.sampled_from([None, None, "tests", ".", "..", "-", "_", "a" * 64]),
    "key": st.one_of(
        st.none(),
        st.sampled_from(["k", " k ", "k\n", "\n", "\x00\n", "é" * 200, "a" * 200, "{k}"]),
        JSON_TEXT.filter(lambda text: 0 < len(text) <= 200),
    ),
    "on_conflict": st.sampled_from(["keep", "replace"]),
    "max_attempts": st.sampled_from([None, None, 1, 2, 3, 10**9]),
    "visibility_timeout": st.sampled_from([None, None, 0.001, 0.0015, 1, 2.5, 300, 86_400]),
    "task": st.sampled_from(
        ["record", "plain", "always_fails", "tests.support.jobs.record", "tests.support.jobs.plain"]
    ),  # fmt: skip
    "job id": st.sampled_from(["prior", "unknown"]),
}
ODD = {
    "args": ANY_ARGS,
    "kwargs": ANY_KWARGS,
    "delay": DELAYS,
    "eta": ETAS,
    "delay names": DELAY_NAMES,
    "queue": QUEUES,
    "key": KEYS,
    "on_conflict": ON_CONFLICT,
    "max_attempts": MAX_ATTEMPTS,
    "visibility_timeout": VISIBILITY,
    "task": TASKS,
    "job id": JOB_IDS,
}


def task_of(name: Any) -> Any:
    return {
        "record": jobs.record,
        "plain": jobs.plain,
        "always_fails": jobs.always_fails,
        "record.run": jobs.record.run,
    }.get(name, name)
