"""Fuzzing the public API: arbitrary values for every argument of every call.

The property: each call EITHER raises a ``DelayQueueError`` (and no other exception type)
and leaves Redis exactly as it was, OR writes jobs that, after a delay worker pass, are
dispatched to Celery (and then run, fail for retry, or die with a reason on the Celery side)
or are in dead with a reason. Nothing the API accepts may stop the worker or be lost.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from celery import Celery
from django.utils import timezone as dj_timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu.utils.json import loads as kombu_loads

import delayqueue
from delayqueue.engine import clients as connection
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.errors import DelayQueueError
from delayqueue.producer.client import Job, JobSpec
from delayqueue.wire import encode_args
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.celery_apps import celery_app_on
from tests.support.corrupt import (
    decode_message,
    parked_broker,
    raw_redis,
    run_like_celery,
    snapshot,
    snapshot_diff,
    take_messages,
)
from tests.support.fuzzing import examples
from tests.support.waiting import wait_for

pytestmark = pytest.mark.fuzz

SUPPRESS = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.function_scoped_fixture,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
]


# ---- values that repr safely ------------------------------------------------------------


@dataclass(frozen=True)
class Recipe:
    """A value too deep, too big or too self-referential to print: built at the call, shown
    by its label in a falsifying example."""

    label: str
    build: Callable[[], Any]

    def __repr__(self) -> str:
        return self.label


def deep_list(levels: int) -> list[Any]:
    top: list[Any] = []
    cur = top
    for _ in range(levels - 1):
        cur.append([])
        cur = cur[0]
    return top


def deep_dict(levels: int) -> dict[str, Any]:
    top: dict[str, Any] = {}
    cur = top
    for _ in range(levels - 1):
        cur["a"] = {}
        cur = cur["a"]
    return top


def self_list() -> list[Any]:
    loop: list[Any] = [1]
    loop.append(loop)
    return loop


def self_dict() -> dict[str, Any]:
    loop: dict[str, Any] = {"a": 1}
    loop["self"] = loop
    return loop


def build(value: Any) -> Any:
    """``value`` with its recipes built (one level into lists, tuples and dicts)."""
    if isinstance(value, Recipe):
        return value.build()
    if type(value) is list:
        return [build(v) for v in value]
    if type(value) is tuple:
        return tuple(build(v) for v in value)
    if type(value) is dict:
        return {build(k): build(v) for k, v in value.items()}
    return value


def _r(label: str, make: Callable[[], Any]) -> Recipe:
    return Recipe(label, make)


def _deep(levels: int, make: Callable[[int], Any]) -> Recipe:
    return Recipe(f"{make.__name__}({levels})", lambda: make(levels))


BIG_RECIPES = [
    *[_deep(n, deep_list) for n in (2, 50, 200, 500, 900, 960, 985, 1000, 2000, 5000)],
    *[_deep(n, deep_dict) for n in (100, 500, 985, 2000)],
    _r("self_list()", self_list),
    _r("self_dict()", self_dict),
    _r("[1, self_list()]", lambda: [1, self_list()]),
    _r("10**5000", lambda: 10**5000),
    _r("-(10**5000)", lambda: -(10**5000)),
    _r("10**4299", lambda: 10**4299),
    _r("2**64", lambda: 2**64),
    _r("'x' * 70_000", lambda: "x" * 70_000),
    _r("'é' * 30_000", lambda: "é" * 30_000),
    _r("'x' * 60_000", lambda: "x" * 60_000),
    _r("'\\x00\\n' * 1000", lambda: "\x00\n" * 1000),
]

ODD_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\n",
    "a\nb",
    "\r\n",
    "\t",
    "\u2028",
    "\ufeff",
    "é",
    "😀",
    "\U0010ffff",
    "k\ud800",
    "\udfff",
    "a\ud83d",
    '"',
    "\\",
    "</script>",
    "{tests}",
    "%s",
]
SURROGATES = st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1)
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(ODD_TEXT),
    st.builds(lambda a, s: a + s, st.text(max_size=3), SURROGATES),
)
NOT_JSON = [
    object(),
    Decimal("1.5"),
    Fraction(1, 3),
    datetime(2030, 1, 1, tzinfo=UTC),
    date(2030, 1, 1),
    1j,
    Ellipsis,
    b"",
    b"bytes",
    bytearray(b"x"),
    frozenset(),
    {1, 2},
    range(3),
    int,
]
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    TEXT,
    st.binary(max_size=4),
    st.sampled_from(NOT_JSON),
)
ODD_KEYS = st.one_of(st.integers(), st.none(), st.booleans(), st.floats(), st.tuples(), TEXT)
# kombu's JSON turns a dict of exactly these two keys into another type (or refuses it).
ENVELOPE_TYPES = st.one_of(
    st.sampled_from(["bytes", "base64", "decimal", "datetime", "date", "time", "uuid", "nope"]),
    TEXT,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner),
        st.dictionaries(TEXT, inner, max_size=3),
        st.fixed_dictionaries({"__type__": ENVELOPE_TYPES, "__value__": inner}),
        st.fixed_dictionaries(
            {"__type__": ENVELOPE_TYPES, "__value__": inner}, optional={"other": inner}
        ),
        st.dictionaries(ODD_KEYS, inner, min_size=1, max_size=2),
        st.frozensets(st.integers(), max_size=2),
    ),
    max_leaves=8,
)
ARG = st.one_of(VALUES, VALUES, st.sampled_from(BIG_RECIPES))
ARGS = st.lists(ARG, max_size=3)
KWARG_NAMES = TEXT.filter(
    lambda name: (
        name
        not in {
            "seconds",
            "minutes",
            "hours",
            "days",
            "delta",
            "eta",
            "key",
            "on_conflict",
            "on_commit",
        }
    )  # fmt: skip
)
KWARGS = st.dictionaries(KWARG_NAMES, ARG, max_size=2)
# What enqueue()/spec() take as args and kwargs: anything at all.
ANY_ARGS = st.one_of(ARGS, ARGS.map(tuple), VALUES, st.sampled_from(BIG_RECIPES))
ANY_KWARGS = st.one_of(st.none(), KWARGS, st.dictionaries(ODD_KEYS, ARG, max_size=2), VALUES)

# ---- delays, etas, names, options -------------------------------------------------------

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
    st.sampled_from([_r("10**5000", lambda: 10**5000), _r("-(10**400)", lambda: -(10**400))]),
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
        _r("10**5000", lambda: 10**5000),
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
        _r("10**5000", lambda: 10**5000),
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


# ---- one call ---------------------------------------------------------------------------


@dataclass
class Prior:
    """A job that exists before the call (to keep, replace, cancel or reschedule)."""

    job: Job
    key: str | None


def make_prior(state: str | None, key: str | None, parked: Celery) -> Prior | None:
    if state is None:
        return None
    job = jobs.record.delay_for("prior", seconds=0 if state == "inflight" else 600, key=key,
                                on_commit=False)  # fmt: skip
    if state == "inflight":
        worker = DelayWorker([job.queue], celery_app=parked)
        try:
            worker.run_pass()
        finally:
            worker.close()
        take_messages()
    return Prior(job, key)


def job_id_of(choice: Any, prior: Prior | None) -> Any:
    if choice == "unknown":
        return new_job_id()
    if prior is None:
        return choice if choice not in ("prior", "prior-lower", "prior\n") else new_job_id()
    return {
        "prior": prior.job.id,
        "prior-lower": prior.job.id.lower(),
        "prior\n": prior.job.id + "\n",
    }.get(choice, choice)


Call = tuple[str, Callable[[], Any]]


def api_call(draw: st.DrawFn, prior: Prior | None) -> Call:
    """One call of the public API with drawn arguments, as (description, thunk): one or two
    kinds of argument (or none) drawn odd, the others valid."""
    odd = draw(st.sets(st.sampled_from([*ODD, "timing"]), max_size=2), "odd arguments")

    def pick(name: str) -> Any:
        return draw(ODD[name] if name in odd else VALID[name], name)

    def timing() -> tuple[Any, Any]:
        """(delay, eta): exactly one of them, unless timing is odd."""
        which = draw(
            st.sampled_from(
                ["delay", "eta", "both", "neither"] if "timing" in odd else ["delay", "eta"]
            )  # fmt: skip
        )
        delay = pick("delay") if which in ("delay", "both") else None
        eta = pick("eta") if which in ("eta", "both") else None
        return delay, eta

    def plain_args() -> Any:
        return draw(ARGS if "args" in odd else VALID_ARGS, "args")

    def plain_kwargs() -> Any:
        return draw(KWARGS if "kwargs" in odd else VALID_KWARGS, "kwargs")

    kind = draw(
        st.sampled_from(
            [
                "delay_for",
                "delay_until",
                "task.delay_many",
                "enqueue",
                "spec",
                "delay_many",
                "cancel",
                "task.cancel",
                "reschedule",
                "task.reschedule",
            ]  # fmt: skip
        ),
        "kind",
    )
    if kind == "delay_for":
        args, kwargs = plain_args(), plain_kwargs()
        delays, key, conflict = pick("delay names"), pick("key"), pick("on_conflict")
        return (
            f"record.delay_for(*{args!r}, **{delays!r}, key={key!r}, on_conflict={conflict!r}, "
            f"on_commit=False, **{kwargs!r})",
            lambda: jobs.record.delay_for(
                *build(args), **build(delays), key=key, on_conflict=conflict, on_commit=False,
                **build(kwargs),
            ),
        )  # fmt: skip
    if kind == "delay_until":
        args, kwargs = plain_args(), plain_kwargs()
        eta, key, conflict = pick("eta"), pick("key"), pick("on_conflict")
        return (
            f"record.delay_until(*{args!r}, eta={eta!r}, key={key!r}, "
            f"on_conflict={conflict!r}, on_commit=False, **{kwargs!r})",
            lambda: jobs.record.delay_until(
                *build(args), eta=eta, key=key, on_conflict=conflict, on_commit=False,
                **build(kwargs),
            ),
        )  # fmt: skip
    if kind == "task.delay_many":
        one = (
            st.one_of(ARGS, ARGS.map(tuple), VALUES, st.sampled_from([{"order_id": 7}]))
            if "args" in odd
            else st.one_of(VALID_ARGS, VALID_ARGS.map(tuple))
        )
        calls = draw(st.lists(one, max_size=4), "calls")
        delays = pick("delay names")
        return (
            f"record.delay_many({calls!r}, **{delays!r}, on_commit=False)",
            lambda: jobs.record.delay_many(build(calls), **build(delays), on_commit=False),
        )
    if kind in ("enqueue", "spec", "delay_many"):
        count = 1 if kind != "delay_many" else draw(st.integers(0, 3), "count")
        specs = []
        for _ in range(count):
            delay, eta = timing()
            options = {
                "delay": delay,
                "eta": eta,
                "queue": pick("queue"),
                "key": pick("key"),
                "on_conflict": pick("on_conflict"),
                "max_attempts": pick("max_attempts"),
                "visibility_timeout": pick("visibility_timeout"),
            }
            options = {name: value for name, value in options.items() if value is not None}
            specs.append((pick("task"), pick("args"), pick("kwargs"), options))
        shown = "; ".join(
            f"{kind}({task!r}, {args!r}, {kwargs!r}, **{options!r})"
            for task, args, kwargs, options in specs
        )
        if kind == "enqueue":
            task, args, kwargs, options = specs[0]
            return shown + ", on_commit=False", lambda: delayqueue.enqueue(
                task_of(task), build(args), build(kwargs), **build(options), on_commit=False
            )
        if kind == "spec":
            task, args, kwargs, options = specs[0]
            return shown, lambda: delayqueue.spec(
                task_of(task), build(args), build(kwargs), **build(options)
            )
        junk: Any = draw(st.sampled_from([None, {"task": "x"}, "spec"]) if "args" in odd
                    else st.none(), "junk spec")  # fmt: skip
        shown = f"delay_many([{shown}]{' + [' + repr(junk) + ']' if junk else ''})"

        def many() -> Any:
            built = [
                delayqueue.spec(task_of(t), build(a), build(k), **build(o)) for t, a, k, o in specs
            ]
            return delayqueue.delay_many(built + ([junk] if junk else []), on_commit=False)

        return shown, many
    by_key = draw(st.booleans(), "by key")
    if "job id" in odd and draw(st.booleans(), "both id and key"):
        job_id, key = job_id_of(pick("job id"), prior), pick("key")
    elif by_key:
        job_id, key = None, (prior.key if prior and prior.key and "key" not in odd
                             else pick("key"))  # fmt: skip
    else:
        job_id, key = job_id_of(pick("job id"), prior), None
    if kind == "cancel":
        queue = pick("queue") or "tests"
        return (
            f"cancel({queue!r}, {job_id!r}, key={key!r})",
            lambda: delayqueue.cancel(queue, job_id, key=key),
        )
    if kind == "task.cancel":
        return (
            f"record.cancel({job_id!r}, key={key!r})",
            lambda: jobs.record.cancel(job_id, key=key),
        )
    if kind == "reschedule":
        queue = pick("queue") or "tests"
        delay, eta = timing()
        return (
            f"reschedule({queue!r}, {job_id!r}, key={key!r}, delay={delay!r}, eta={eta!r})",
            lambda: delayqueue.reschedule(queue, job_id, key=key, delay=build(delay), eta=eta),
        )
    delay, eta = timing()
    delays = pick("delay names") if eta is None else {}
    return (
        f"record.reschedule({job_id!r}, key={key!r}, **{delays!r}, eta={eta!r})",
        lambda: jobs.record.reschedule(job_id, key=key, **build(delays), eta=eta),
    )


@st.composite
def api_calls(draw: st.DrawFn, prior: Prior | None) -> Call:
    return api_call(draw, prior)


# ---- what a written job must become -----------------------------------------------------


def redis_now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def accepted_jobs(result: Any) -> list[Job]:
    if isinstance(result, Job):
        return [result]
    if isinstance(result, list):
        return [job for job in result if isinstance(job, Job)]
    return []


def check_runs(r: redis.Redis, written: list[Job], parked: Celery, call: str) -> None:
    """The written jobs, made due now, go through a worker pass and the Celery side: each
    ends dispatched and then run / retried / dead, or dead with a reason at the pass."""
    # A dedupe key that kept a job already in flight: its dispatch is out there already.
    written = [job for job in written if not (job.outcome == "kept" and job.state == "inflight")]
    if not written:
        return
    queues = sorted({job.queue for job in written})
    now = redis_now_ms(r)
    for job in written:
        keys = queue_keys(job.queue)
        states = [s for s in ("scheduled", "inflight") if r.zscore(getattr(keys, s), job.id)]
        assert states, f"{call}: returned job {job.id} ({job.outcome}) is in no queue state"
        score = r.zscore(keys.scheduled, job.id)
        if score is not None and score > now:
            r.zadd(keys.scheduled, {job.id: now}, xx=True)  # time passes
    worker = DelayWorker(queues, celery_app=parked)
    try:
        for _ in range(3):
            try:
                result = worker.run_pass()
            except BaseException as exc:
                raise AssertionError(f"{call}: the worker pass raised {exc!r}") from exc
            if not result.claimed:
                break
    finally:
        worker.close()  # its connections, not left to the garbage collector
    dispatched: set[str] = set()
    for payload in take_messages():
        try:
            message = decode_message(payload)
        except BaseException as exc:
            raise AssertionError(
                f"{call}: a dispatched message cannot be decoded as Celery would ({exc!r})"
            ) from exc
        dispatched.add(message.dispatch[1])
        try:
            outcome = run_like_celery(message, parked.tasks)
        except BaseException as exc:
            raise AssertionError(f"{call}: the Celery side raised {exc!r}") from exc
        assert outcome != "stale", f"{call}: a fresh dispatch of {message.dispatch} was stale"
    for job in written:
        keys = queue_keys(job.queue)
        dead = r.zscore(keys.dead, job.id) is not None
        if dead:
            why = r.hget(keys.job(job.id), "why")
            assert why, f"{call}: job {job.id} is dead without a reason"
            continue
        assert job.id in dispatched, f"{call}: job {job.id} was neither dispatched nor buried"
        assert r.zscore(keys.inflight, job.id) is None, (
            f"{call}: job {job.id} is still in flight after the Celery side ran it"
        )


def check_cancelled(r: redis.Redis, prior: Prior | None, call: str) -> None:
    assert prior is not None, f"{call}: cancelled a job though none existed"
    keys = queue_keys(prior.job.queue)
    job_id = prior.job.id
    for state in ("scheduled", "inflight", "dead"):
        assert r.zscore(getattr(keys, state), job_id) is None, f"{call}: still {state}"
    assert not r.exists(keys.job(job_id)), f"{call}: the cancelled job's hash stayed"
    assert r.hget(keys.spec_bucket(job_id), job_id) is None, (
        f"{call}: the cancelled job's spec stayed"
    )
    if prior.key is not None:
        assert r.hget(keys.dedupe, prior.key) != job_id, f"{call}: its dedupe key stayed"


def check_rescheduled(r: redis.Redis, job: Job, call: str) -> None:
    keys = queue_keys(job.queue)
    score = r.zscore(keys.scheduled, job.id)
    assert score is not None, f"{call}: the rescheduled job is not scheduled"
    assert job.due_at is not None
    assert abs(score - job.due_at.timestamp() * 1000) < 1.5, (
        f"{call}: due_at {job.due_at} is not the stored due time {score}"
    )


# ---- the properties ---------------------------------------------------------------------


@pytest.fixture
def fresh(r: redis.Redis, parked_celery: Celery) -> Callable[[], None]:
    def reset() -> None:
        r.flushdb()
        connection.reset()  # forgets which queues it already added to dq:queues
        parked_broker().delete("celery")

    return reset


@settings(max_examples=examples(800), suppress_health_check=SUPPRESS)
@given(data=st.data())
def test_every_api_call_raises_a_documented_error_and_writes_nothing_or_its_job_runs(
    r: redis.Redis, parked_celery: Celery, fresh: Callable[[], None], data: st.DataObject
) -> None:
    fresh()
    prior_state = data.draw(st.sampled_from([None, None, "scheduled", "inflight"]), "prior")
    prior_key = data.draw(st.sampled_from([None, "k", " k ", "k\n"]), "prior key")
    prior = make_prior(prior_state, prior_key, parked_celery)
    call, thunk = data.draw(api_calls(prior), "call")
    raw = raw_redis()
    before = snapshot(raw)
    try:
        result = thunk()
    except DelayQueueError:
        changes = snapshot_diff(before, snapshot(raw))
        assert not changes, f"{call} raised a DelayQueueError but changed Redis: {changes}"
        return
    except BaseException as exc:
        raise AssertionError(f"{call} raised {type(exc).__name__}, not a DelayQueueError") from exc
    finally:
        raw.close()
    after = snapshot(raw_redis())
    if call.startswith("spec("):
        assert isinstance(result, JobSpec), call
        assert not snapshot_diff(before, after), f"{call}: spec() wrote to Redis"
        return
    if call.startswith(("cancel(", "record.cancel(")):
        if result:
            check_cancelled(r, prior, call)
        else:
            assert not snapshot_diff(before, after), f"{call} cancelled nothing but wrote"
        return
    if call.startswith(("reschedule(", "record.reschedule(")):
        if result is None:
            assert not snapshot_diff(before, after), f"{call} moved nothing but wrote"
            return
        check_rescheduled(r, result, call)
        check_runs(r, [result], parked_celery, call)
        return
    written = accepted_jobs(result)
    if not written:
        assert not snapshot_diff(before, after), f"{call} returned no job but wrote"
        return
    check_runs(r, written, parked_celery, call)


_ODD_TASKS = itertools.count()


@settings(max_examples=examples(150), suppress_health_check=SUPPRESS)
@given(
    queue=QUEUES,
    max_attempts=MAX_ATTEMPTS,
    visibility=VISIBILITY,
    backoff=st.sampled_from(
        [None, 0, 0.01, -1, math.nan, math.inf, "1", True, 1e300, lambda attempt: -5.0]
    ),
    args=ARGS,
)
def test_delayed_task_options_are_checked_once_at_decoration(
    r: redis.Redis,
    parked_celery: Celery,
    fresh: Callable[[], None],
    queue: Any,
    max_attempts: Any,
    visibility: Any,
    backoff: Any,
    args: list[Any],
) -> None:
    """Options @delayed_task accepts must not make the task's calls fail: either the
    decoration raises a DelayQueueError, or the task schedules jobs that run."""
    fresh()
    options = {
        "queue": queue,
        "max_attempts": max_attempts,
        "visibility_timeout": visibility,
        "backoff": backoff,
    }
    shown = f"delayed_task(**{options!r})"
    name = f"tests.fuzz.odd.{next(_ODD_TASKS)}"  # a new task each time: Celery keeps names
    options = {k: build(v) for k, v in options.items()}

    def odd(*a: Any, **k: Any) -> None:
        jobs._report("odd", repr(a)[:50])
        raise ValueError("odd tasks fail, to exercise the backoff")

    # @delayed_task resolves through Celery's current app, which the parked app became when
    # it was made: the project's app again, as in a real process (and the parked one too).
    jobs.record.app.set_current()
    try:
        task = delayqueue.delayed_task(name=name, **options)(odd)
    except DelayQueueError:
        return
    except BaseException as exc:
        raise AssertionError(f"{shown} raised {type(exc).__name__}: {exc}") from exc
    registered: Any = jobs.record.app.tasks[name]  # the task, not shared_task's proxy
    task = registered
    parked_celery.tasks[name] = task
    try:
        job = task.delay_for("x", seconds=0, on_commit=False)
    except BaseException as exc:
        raise AssertionError(
            f"{shown} was accepted, then task.delay_for('x', seconds=0) raised {exc!r}"
        ) from exc
    check_runs(r, [job], parked_celery, f"{shown}; task.delay_for('x', seconds=0)")
    try:
        args_built = build(args)
        more = task.delay_many([args_built], seconds=0, on_commit=False)
    except DelayQueueError:
        return
    except BaseException as exc:
        raise AssertionError(f"{shown}; task.delay_many([{args!r}]) raised {exc!r}") from exc
    check_runs(r, more, parked_celery, f"{shown}; task.delay_many([{args!r}], seconds=0)")


# ---- end to end, with a real Celery worker ----------------------------------------------


def accepted_depth_limit() -> int:
    """The deepest list nesting spec() accepts (found by bisection; spec() writes nothing)."""
    low, high = 1, 20_000
    while low < high:
        middle = (low + high + 1) // 2
        try:
            delayqueue.spec(jobs.record, [deep_list(middle)], delay=0)
        except DelayQueueError:
            high = middle - 1
        else:
            low = middle
    return low


ODD_BUT_VALID = [
    "k\u2028\u2029",
    "\x00\n\r\t",
    "😀" * 100,
    "\U0010ffff\ufeff",
    "é" * 1000,
    "</script><b>",
    {"\x00": ["\n", None, -0.0, 1e308, 2**63, -(2**63)]},
    [[], {}, "", 0, False],
]


@pytest.mark.timeout(120)
def test_odd_but_accepted_jobs_run_or_die_with_a_reason_on_a_real_celery_worker(
    r: redis.Redis, celery_worker: Any
) -> None:
    depth = accepted_depth_limit()
    calls: list[tuple[str, Callable[[], Job]]] = [
        (
            f"nesting {depth}",
            lambda: jobs.record.delay_for(deep_list(depth), seconds=0, on_commit=False),
        ),  # fmt: skip
        (
            f"dict nesting {depth}",
            lambda: delayqueue.enqueue(jobs.record, [deep_dict(depth)], delay=0, on_commit=False),
        ),  # fmt: skip
        (
            f"plain task, nesting {depth}",
            lambda: delayqueue.enqueue(
                "tests.support.jobs.plain", [deep_list(depth)], delay=0, on_commit=False
            ),
        ),  # fmt: skip
        (
            f"kwargs nesting {depth}",
            lambda: delayqueue.enqueue(
                jobs.record, [], {"tag": deep_list(depth)}, delay=0, on_commit=False
            ),
        ),  # fmt: skip
        (
            "queue '.'",
            lambda: delayqueue.enqueue(jobs.record, ["dot"], delay=0, queue=".", on_commit=False),
        ),  # fmt: skip
        (
            "queue '..'",
            lambda: delayqueue.enqueue(
                jobs.record, ["dotdot"], delay=0, queue="..", on_commit=False
            ),
        ),  # fmt: skip
        (
            "key with NUL and newline",
            lambda: jobs.record.delay_for("keyed", seconds=0, key="k\x00\n\u2028", on_commit=False),
        ),  # fmt: skip
        (
            "visibility 0.0015 s",
            lambda: delayqueue.enqueue(
                jobs.record, ["short vt"], delay=0, visibility_timeout=0.0015, on_commit=False
            ),
        ),  # fmt: skip
        (
            "max_attempts 10**9",
            lambda: delayqueue.enqueue(
                jobs.record, ["many"], delay=0, max_attempts=10**9, on_commit=False
            ),
        ),  # fmt: skip
        (
            "big payload",
            lambda: jobs.record.delay_for("x" * 60_000, seconds=0, on_commit=False),
        ),  # fmt: skip
        *[
            (
                f"value {value!r}",
                lambda value=value: jobs.record.delay_for(value, seconds=0, on_commit=False),
            )  # fmt: skip
            for value in ODD_BUT_VALID
        ],
    ]
    written: dict[str, tuple[str, Job]] = {}
    refused: list[str] = []
    for what, call in calls:
        try:
            job = call()
        except DelayQueueError:
            refused.append(what)
            continue
        except BaseException as exc:
            raise AssertionError(f"{what}: raised {exc!r}") from exc
        written[job.id] = (what, job)
    assert len(written) >= len(calls) - 4, f"too much refused: {refused}"
    # A Celery app of its own on the broker the session's Celery worker consumes (earlier
    # tests left a parked app as Celery's current one).
    app = celery_app_on(os.environ["CELERY_BROKER_URL"])
    worker = DelayWorker(sorted({job.queue for _, job in written.values()}), celery_app=app)
    errors: list[str] = []

    def settled() -> bool:
        try:
            worker.run_pass()
        except BaseException as exc:
            errors.append(repr(exc))
            return True
        for _, job in written.values():
            keys = queue_keys(job.queue)
            if r.zscore(keys.dead, job.id) is not None:
                continue
            if r.exists(keys.job(job.id)) or r.hexists(keys.spec_bucket(job.id), job.id):
                return False
        return True

    try:
        wait_for(settled, timeout=60, interval=0.05)
    except AssertionError:
        pass
    assert not errors, f"the worker pass raised: {errors}"
    unsettled = []
    for what, job in written.values():
        keys = queue_keys(job.queue)
        if r.zscore(keys.dead, job.id) is not None:
            if not r.hget(keys.job(job.id), "why"):
                unsettled.append(f"{what}: dead without a reason")
            continue
        if r.exists(keys.job(job.id)) or r.hexists(keys.spec_bucket(job.id), job.id):
            states = [s for s in ("scheduled", "inflight") if r.zscore(getattr(keys, s), job.id)]
            unsettled.append(f"{what}: still {states or 'stored'} after 60 s")
    assert not unsettled, unsettled
    ran = [run["tag"] for run in jobs.ran()]
    for what, job in written.values():
        keys = queue_keys(job.queue)
        if r.zscore(keys.dead, job.id) is None:
            assert ran, f"{what}: acked but no run was recorded"


@settings(max_examples=examples(400), suppress_health_check=SUPPRESS)
@given(args=ARGS, kwargs=KWARGS)
def test_what_the_api_accepts_reaches_the_task_as_the_same_values(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    """The Celery worker decodes a message's arguments with kombu's JSON, which turns some
    dicts into other types: whatever the API accepts, kombu decodes to the very values
    plain JSON does (no b'...', no Decimal, no message it cannot decode)."""
    try:
        args_json, kwargs_json = encode_args(args, kwargs, 10**7)
    except DelayQueueError:
        return
    assert kombu_loads(args_json) == json.loads(args_json)
    if kwargs_json:
        assert kombu_loads(kwargs_json) == json.loads(kwargs_json)
