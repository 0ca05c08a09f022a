"""A schedule's record that is not what delayqueue writes (planted with write access to
Redis, or left by a deploy) is that schedule's problem, on a real Redis: the delay worker's
pass moves every other schedule on and claims every other job, a worker starts, the
Schedules page answers and shows the problem, ``schedules list`` exits 0 and prints no
terminal escape; pause, resume and run-now of such a record say why they cannot."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any

import pytest
import redis
from celery import Celery
from django.core.management import call_command
from django.core.management.base import CommandError

import delayqueue
from delayqueue.engine.keys import ScheduleField, queue_keys
from delayqueue.periodic import declarations, planner
from delayqueue.periodic import declare as declaring
from delayqueue.services import schedules as schedule_service
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.admin_pages import messages_of, text, url, user_client
from tests.support.clocks import MINUTE, mid_hour
from tests.support.corrupt import AFTER_YEAR_9999_MS, YEAR_0_MS, decode_message, take_messages
from tests.support.states import redis_ms

Q = "periodic"
OTHER = "plain"
RECORD = "tests.support.jobs.record"
HOUR = 3_600_000


@pytest.fixture
def good(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], None]]:
    """Declare (in code, for this test alone) and plan a good every-minute schedule."""
    monkeypatch.setattr(declarations, "_in_code", {})

    def add(name: str) -> None:
        build = declaring._builder(RECORD, (name,), None, Q)
        declarations.add(
            declaring._declared(name, RECORD, cron=None, every=60, timezone=None,
                                missed="once", source="code", build=build)
        )  # fmt: skip

    yield add


def plant(r: redis.Redis, name: str, score: float, **changes: str) -> None:
    """A schedule ``name`` with the record of the planned schedule "good", ``changes``
    written over it, scored ``score`` in the queue's schedules."""
    keys = queue_keys(Q)
    record: dict[Any, Any] = dict(r.hgetall(keys.schedule("good")))
    record.update({getattr(ScheduleField, k.upper()): v for k, v in changes.items()})
    r.hset(keys.schedule(name), mapping=record)
    r.zadd(keys.schedules, {name: score})


# Each: (the record's changes, its score as a function of Redis's now).
BAD_RECORDS: dict[str, tuple[dict[str, str], Callable[[int], float]]] = {
    "minus-inf": ({}, lambda now: float("-inf")),
    "huge-every": ({"every_ms": "100000000000000000000"}, lambda now: now - 10),
    "far-past-cron": (
        {"cron": "0 6 * * *", "every_ms": "", "next": str(-(10**15))},
        lambda now: -(10**15),
    ),
    "minus-1e15": ({}, lambda now: -1e15),
    "negative": ({}, lambda now: -5),
    "year-0": ({}, lambda now: YEAR_0_MS),
}


def _due_now(r: redis.Redis) -> str:
    return str(delayqueue.enqueue(jobs.record, ["plain"], delay=0, queue=OTHER, on_commit=False).id)


@pytest.mark.parametrize("bad", sorted(BAD_RECORDS))
def test_a_bad_schedule_stops_neither_the_other_schedules_nor_any_queues_jobs(
    r: redis.Redis,
    parked_celery: Celery,
    good: Callable[[str], None],
    caplog: pytest.LogCaptureFixture,
    bad: str,
) -> None:
    good("good")
    planner.reconcile()
    changes, score = BAD_RECORDS[bad]
    now = redis_ms(r)
    plant(r, bad, score(now), **changes)
    # the good schedule came due too, and a plain job on another queue
    r.zadd(queue_keys(Q).schedules, {"good": now - 10})
    r.hset(queue_keys(Q).schedule("good"), ScheduleField.NEXT, str(now - 10))
    plain = _due_now(r)
    worker = DelayWorker([Q, OTHER], celery_app=parked_celery)
    worker.schedule_queues = [Q]
    caplog.set_level(logging.DEBUG, logger="delayqueue")
    try:
        for _ in range(3):
            worker.run_pass()
    finally:
        worker.close()
    sent = {decode_message(p).dispatch[1] for p in take_messages()}
    assert plain in sent  # the ordinary job of another queue was dispatched
    moved = r.zscore(queue_keys(Q).schedules, "good")
    assert moved is not None and moved > now  # the good schedule moved on
    said = [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert [rec.getMessage() for rec in said if f"schedule {bad} " in rec.getMessage()], said
    assert len(said) == 1, [rec.getMessage() for rec in said]  # said once, not every pass
    assert "pass failed" not in caplog.text


def test_a_last_run_that_is_no_number_does_not_stop_a_workers_start(
    r: redis.Redis,
    parked_celery: Celery,
    good: Callable[[str], None],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (a plan made just before a minute ends is for the minute that has begun when the test
    # would read Redis's clock: the planner's clock is pinned, ten seconds into a minute)
    now = mid_hour(r, monkeypatch)
    good("good")
    good("other")
    planner.reconcile()
    keys = queue_keys(Q)
    # what a deploy that changes the schedule finds: another fingerprint, and a last run
    # that no build wrote
    r.hset(keys.schedule("good"), mapping={ScheduleField.LAST: "abc",
                                           ScheduleField.FINGERPRINT: "changed"})  # fmt: skip
    r.hset(keys.schedule("other"), mapping={ScheduleField.LAST: "9" * 17,
                                            ScheduleField.FINGERPRINT: "changed"})  # fmt: skip
    worker = DelayWorker([Q], celery_app=parked_celery)
    try:
        done = worker.reconcile_schedules()
    finally:
        worker.close()
    assert done is not None and sorted(done.planned) == ["good", "other"]
    for name in ("good", "other"):  # planned from now, as a schedule with no last run
        assert r.zscore(keys.schedules, name) == (now // MINUTE + 1) * MINUTE


def test_a_record_the_reconcile_cannot_write_is_that_schedules_failure(
    r: redis.Redis, good: Callable[[str], None]
) -> None:
    good("good")
    good("other")
    planner.reconcile()
    keys = queue_keys(Q)
    r.delete(keys.schedule("good"))
    r.set(keys.schedule("good"), "not a hash")  # its plan script meets WRONGTYPE
    r.hset(keys.schedule("other"), ScheduleField.FINGERPRINT, "changed")
    done = planner.reconcile()
    assert "good" in done.failed and done.planned == ["other"]


def test_the_next_start_heals_a_next_occurrence_that_is_no_instant_and_removes_a_planted_one(
    r: redis.Redis, good: Callable[[str], None]
) -> None:
    good("good")
    planner.reconcile()
    keys = queue_keys(Q)
    r.zadd(keys.schedules, {"good": float("-inf")})  # its record otherwise as planned
    plant(r, "evil", float("-inf"))
    done = planner.reconcile()
    assert done.planned == ["good"] and done.removed == ["evil"]
    score = r.zscore(keys.schedules, "good")
    assert score is not None and 0 < score <= redis_ms(r) + 60_000
    assert r.zscore(keys.schedules, "evil") is None


# ---- the Schedules page and the command line -------------------------------------------

PAGE_RECORDS: dict[str, tuple[dict[str, str], float | None]] = {
    "slash-job": ({"last_job": "a/b", "last": "1764000000000"}, None),
    "huge-last": ({"last": "99999999999999999"}, None),
    "score-1e17": ({}, 1e17),
    "score-minus-1e15": ({}, -1e15),
    "huge-every": ({"every_ms": "100000000000000000000"}, None),
    "cron-past-9999": ({"cron": "0 0 1 1 *", "every_ms": ""}, AFTER_YEAR_9999_MS - 2 * HOUR),
    "escape": ({"task": "\x1b]0;pwned\x07"}, None),
}


def plant_page_records(r: redis.Redis) -> None:
    now = redis_ms(r)
    for name, (changes, score) in PAGE_RECORDS.items():
        plant(r, name, now + 60_000 if score is None else score, **changes)
    plant(r, "paused-bad", float("inf"), every_ms="100000000000000000000", paused="1")


@pytest.mark.django_db
def test_the_schedules_page_shows_bad_records_as_problems_and_acts_on_them(
    r: redis.Redis, django_user_model: Any, good: Callable[[str], None]
) -> None:
    good("good")
    planner.reconcile()
    plant_page_records(r)
    client = user_client(
        django_user_model, "admin", "view_jobs", "pause_schedules", "run_schedules"
    )
    page = client.get(url("schedules"))
    assert page.status_code == 200
    body = text(page)
    assert body.count('class="problem"') == len(PAGE_RECORDS) - 1 + 1  # "escape" is no problem
    assert body.count("<li><time") >= 5  # the good schedule's next runs
    for name in [*PAGE_RECORDS, "paused-bad", "good"]:
        assert f'data-schedule="{name}"' in body
    resumed = client.post(url("schedule_act"), {"action": "resume", "name": "paused-bad"},
                          follow=True)  # fmt: skip
    assert resumed.status_code == 200
    assert any("cannot be resumed" in m for m in messages_of(resumed)), messages_of(resumed)
    for name in PAGE_RECORDS:
        for action in ("pause", "run_now"):
            done = client.post(url("schedule_act"), {"action": action, "name": name})
            assert done.status_code == 302, (name, action)


def test_schedules_list_exits_0_shows_the_problems_and_escapes_what_it_prints(
    r: redis.Redis, good: Callable[[str], None]
) -> None:
    good("good")
    planner.reconcile()
    plant_page_records(r)
    out = StringIO()
    call_command("delayqueue", "schedules", "list", stdout=out)
    printed = out.getvalue()
    assert "\x1b" not in printed and "\x07" not in printed
    assert "\\x1b]0;pwned\\x07" in printed
    assert printed.count("  problem: ") == len(PAGE_RECORDS) - 1 + 1
    out = StringIO()
    call_command("delayqueue", "schedules", "list", "--json", stdout=out)
    listed = {view["name"]: view for view in json.loads(out.getvalue())}
    assert listed["escape"]["task"] == "\x1b]0;pwned\x07"  # JSON carries it, escaped
    assert "\x1b" not in out.getvalue()
    assert listed["slash-job"]["last_job"] is None and listed["slash-job"]["problem"]
    assert listed["good"]["problem"] is None and len(listed["good"]["next_runs"]) == 5
    with pytest.raises(CommandError) as refused:
        call_command("delayqueue", "schedules", "resume", "paused-bad", stdout=StringIO())
    assert refused.value.returncode == 1 and "cannot be resumed" in str(refused.value)


def test_a_view_of_each_bad_record_names_its_problem(
    r: redis.Redis, good: Callable[[str], None]
) -> None:
    good("good")
    planner.reconcile()
    plant_page_records(r)
    views = {view.name: view for view in schedule_service.all_schedules()}
    assert "last job 'a/b' is not a job id" in str(views["slash-job"].problem)
    assert "last run" in str(views["huge-last"].problem)
    for name in ("score-1e17", "score-minus-1e15", "huge-every", "cron-past-9999"):
        assert views[name].problem and views[name].next_runs == [], name
    r.zadd(queue_keys(Q).schedules, {"good": float("-inf")})
    [view] = [view for view in schedule_service.all_schedules() if view.name == "good"]
    assert view.problem == "its next occurrence is not an instant"
