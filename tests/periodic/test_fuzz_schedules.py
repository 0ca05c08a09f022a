"""Fuzzing what Redis holds of periodic schedules: every field of a schedule's record, its
score in the queue's schedules (``±inf``, huge, negative, before the year 1, past 9999),
schedules with no record, records of the wrong type, a schedules zset of the wrong type.

Schedules of every kind (every, cron in a timezone, missed="skip", paused) are planned
and run once through the planner, their occurrences made due, then Hypothesis corrupts
them. The properties, each the promise that one bad record is that schedule's problem:
the delay worker's passes never raise and claim the ordinary jobs of both queues, a
worker's start (the reconcile) runs, the Schedules page answers 200 and no act on a
schedule answers 500, ``schedules list`` (and ``--json``) exits 0 and prints no control
character taken from Redis."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
import redis
from celery import Celery
from django.core.management import call_command
from django.test import Client
from hypothesis import Phase, example, given, settings
from hypothesis import strategies as st

import delayqueue
from delayqueue.engine.keys import ScheduleField, queue_keys
from delayqueue.periodic import declarations, planner
from delayqueue.periodic import declare as declaring
from delayqueue.services import schedules as schedule_service
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.admin_pages import url
from tests.support.corrupt import (
    NOT_UTF8,
    SCORES,
    VALUES,
    decode_message,
    raw_redis,
    set_wrong_type,
    take_messages,
)
from tests.support.fuzzing import SUPPRESS, examples
from tests.support.states import redis_ms

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]

Q = "periodic"
OTHER = "plain"
RECORD = "tests.support.jobs.record"
TAGS = ["every", "cron", "skip", "paused"]
FIELDS = [value for name, value in vars(ScheduleField).items() if name.isupper()]
SCHEDULE_VALUES: list[bytes | None] = [
    *VALUES,
    b"-1000000000000000",
    b"100000000000000000000",
    b"99999999999999999",
    b"281474976710656",  # 2**48: past what an occurrence id holds
    b"253402300800000",  # the year 10000
    b"\x1b]0;pwned\x07",
    "a\u2028b".encode(),
    b"0 0 1 1 *",
    b"0 0 29 2 *",
    b"61 * * * *",
    b"@reboot",
    b"Mars/Olympus",
    b"localtime",
    b"all",
    b"sometimes",
    b"01HZZZZZZZZZZZZZZZZZZZZZZZ",
]
SCHEDULE_SCORES = [*SCORES, -1e15, 1e17, -(10**15), 1e20, 2**48, -0.5]
JUNK_NAMES = [b"a/b", b"", b" ", NOT_UTF8, b"x" * 1000, b"<b>", b"\x1b]0;pwned\x07", b"\n"]
WRONG_TYPES = ["string", "list", "set", "zset"]

CORRUPTIONS = st.one_of(
    st.tuples(
        st.just("field"),
        st.sampled_from(TAGS),
        st.sampled_from(FIELDS),
        st.sampled_from(SCHEDULE_VALUES),
    ),  # fmt: skip
    st.tuples(st.just("score"), st.sampled_from(TAGS), st.sampled_from(SCHEDULE_SCORES)),
    st.tuples(
        st.just("member"),
        st.sampled_from(JUNK_NAMES),
        st.sampled_from(SCHEDULE_SCORES),
        st.booleans(),
    ),  # fmt: skip
    st.tuples(st.just("record"), st.sampled_from(TAGS), st.sampled_from(WRONG_TYPES)),
    st.tuples(st.just("zset"), st.sampled_from(WRONG_TYPES)),
)


@pytest.fixture
def declared(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Four schedules declared in code for this test alone."""
    monkeypatch.setattr(declarations, "_in_code", {})
    rules: list[tuple[str, dict[str, Any]]] = [
        ("every", {"every": 60}),
        ("cron", {"cron": "*/5 * * * *", "timezone": "Europe/Berlin", "missed": "all"}),
        ("skip", {"every": 3600, "missed": "skip"}),
        ("paused", {"every": 60}),
    ]
    for name, rule in rules:
        build = declaring._builder(RECORD, (name,), None, Q)
        declarations.add(
            declaring._declared(name, RECORD, cron=rule.get("cron"), every=rule.get("every"),
                                timezone=rule.get("timezone"), missed=rule.get("missed", "once"),
                                source="code", build=build)
        )  # fmt: skip
    yield


def plant(raw: redis.Redis) -> tuple[str, str]:
    """The four schedules planned, each run once (so each has a last run and job), the
    active ones due again; an ordinary job due now on each queue: their ids."""
    planner.reconcile()
    keys = queue_keys(Q)
    now = redis_ms(raw)
    for name in ("every", "cron", "skip"):
        seen = int(raw.zscore(keys.schedules, name) or 0)
        planner.fire_due(Q, now_ms=seen + 1)
    schedule_service.pause("paused")
    for name in ("every", "cron", "skip"):  # due again, as a planted record would be
        raw.zadd(keys.schedules, {name: now - 10})
        raw.hset(keys.schedule(name), ScheduleField.NEXT, str(now - 10))
    ours = delayqueue.enqueue(jobs.record, ["q"], delay=0, queue=Q, on_commit=False)
    other = delayqueue.enqueue(jobs.record, ["other"], delay=0, queue=OTHER, on_commit=False)
    return ours.id, other.id


def apply(raw: redis.Redis, corruption: tuple[Any, ...]) -> None:
    keys = queue_keys(Q)
    kind = corruption[0]
    try:
        if kind == "field":
            _, tag, name, value = corruption
            if value is None:
                raw.hdel(keys.schedule(tag), name)
            else:
                raw.hset(keys.schedule(tag), name, value)
        elif kind == "score":
            _, tag, score = corruption
            raw.zadd(keys.schedules, {tag: score})
        elif kind == "member":
            _, member, score, with_record = corruption
            raw.zadd(keys.schedules, {member: score})
            if with_record:
                raw.hset(keys.schedule("").encode() + member, mapping={
                    "task": b"\x1b]0;pwned\x07", "every_ms": b"60000", "next": b"x"})  # fmt: skip
        elif kind == "record":
            set_wrong_type(raw, keys.schedule(corruption[1]), corruption[2])
        else:
            set_wrong_type(raw, keys.schedules, corruption[1])
    except redis.ResponseError as exc:  # an earlier corruption gave the key another type
        if not str(exc).startswith("WRONGTYPE"):
            raise


def passes(parked: Celery, problems: list[str], rounds: int = 2) -> set[str]:
    """Worker passes that fire the schedules of Q: the ids they dispatched."""
    worker = DelayWorker([Q, OTHER], celery_app=parked)
    worker.schedule_queues = [Q]
    try:
        for _ in range(rounds):
            try:
                worker.run_pass()
            except BaseException as exc:
                problems.append(f"run_pass raised {type(exc).__name__}: {exc}"[:400])
        try:
            if worker.reconcile_schedules() is None:
                problems.append("the reconcile at start did not run")
        except BaseException as exc:
            problems.append(f"the reconcile raised {type(exc).__name__}: {exc}"[:400])
    finally:
        worker.close()
    return {decode_message(payload).dispatch[1] for payload in take_messages()}


def names_listed(raw: redis.Redis) -> list[str]:
    try:
        found: Any = raw.zrange(queue_keys(Q).schedules, 0, -1)
    except redis.ResponseError:
        return list(TAGS)
    return [bytes(name).decode("utf-8", "backslashreplace") for name in found] + list(TAGS)


def pages_and_acts(client: Client, raw: redis.Redis, problems: list[str]) -> None:
    try:
        page = client.get(url("schedules"))
    except Exception as exc:
        problems.append(f"GET schedules raised {type(exc).__name__}: {exc}"[:300])
    else:
        if page.status_code != 200:
            problems.append(f"GET schedules answered {page.status_code}")
    for name in dict.fromkeys(names_listed(raw)):
        for action in ("pause", "resume", "run_now"):
            try:
                done = client.post(url("schedule_act"), {"action": action, "name": name})
            except Exception as exc:
                problems.append(f"POST {action} {name[:40]!r} raised {exc!r}"[:300])
                continue
            if done.status_code >= 500:
                problems.append(f"POST {action} {name[:40]!r} answered {done.status_code}")


def command_line(problems: list[str]) -> None:
    for extra in ([], ["--json"]):
        out = StringIO()
        try:
            call_command("delayqueue", "schedules", "list", *extra, stdout=out)
        except BaseException as exc:
            problems.append(f"schedules list {extra} raised {type(exc).__name__}: {exc}"[:300])
            continue
        printed = out.getvalue()
        shown = [c for c in printed if not c.isprintable() and c not in "\n"]
        if shown:
            problems.append(f"schedules list {extra} printed control characters {shown[:5]}")


# No shrinking: the corruptions of a failing example are few and named in the failure.
@settings(
    max_examples=examples(60),
    suppress_health_check=SUPPRESS,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(corruptions=st.lists(CORRUPTIONS, min_size=1, max_size=4))
# Found by a long run: a task name with a line separator (U+2028) went to the terminal as is.
@example(corruptions=[("field", "every", "task", "a\u2028b".encode())])
def test_whatever_a_schedule_holds_the_worker_the_page_and_the_command_line_go_on(
    parked_celery: Celery,
    fresh: Callable[[], None],
    declared: None,
    superuser: Client,
    corruptions: list[tuple[Any, ...]],
) -> None:
    fresh()
    raw = raw_redis()
    ours, other = plant(raw)
    for corruption in corruptions:
        apply(raw, corruption)
    problems: list[str] = []
    sent = passes(parked_celery, problems)
    if not {ours, other} <= sent:
        problems.append(f"the ordinary jobs were not dispatched: {sorted({ours, other} - sent)}")
    pages_and_acts(superuser, raw, problems)
    command_line(problems)
    passes(parked_celery, problems, rounds=1)  # after the acts (resumed, run now)
    raw.close()
    assert not problems, "\n".join(dict.fromkeys(problems))
