"""Periodic schedules on a real Redis: planned when a delay worker reconciles, moved on once
per occurrence however many workers try, missed occurrences by policy, pause / resume /
run-now, the admin's Schedules page, the command line, the system checks and the metrics;
and end to end, real delay workers and a real Celery worker run an every-second schedule
once per tick."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from prometheus_client import REGISTRY

from delayqueue.engine import schedules
from delayqueue.engine.keys import JOB_ID, ScheduleField, queue_keys
from delayqueue.engine.schedule_record import ScheduleRecord
from delayqueue.periodic import declarations, planner
from delayqueue.periodic.identity import occurrence_id
from delayqueue.services import schedules as schedule_service
from tests.support import jobs
from tests.support.admin_pages import text, url, user_client
from tests.support.clocks import mid_hour
from tests.support.states import redis_ms
from tests.support.waiting import wait_for

Q = "periodic"
MINUTE = 60_000
RECORD = "tests.support.jobs.record"


def stored(name: str) -> ScheduleRecord:
    [found] = schedules.stored(Q, name)
    return found


def scheduled_at(r: redis.Redis, job_id: str) -> float | None:
    return r.zscore(queue_keys(Q).scheduled, job_id)


# ---- identity ------------------------------------------------------------------------------


def test_an_occurrence_id_is_the_schedules_and_the_instants() -> None:
    one = occurrence_id("report", 1_764_000_000_000)
    assert one == occurrence_id("report", 1_764_000_000_000)  # any worker, any deployment
    assert JOB_ID.fullmatch(one)
    assert one != occurrence_id("report", 1_764_000_060_000)
    assert one != occurrence_id("other", 1_764_000_000_000)
    later = occurrence_id("report", 1_764_000_060_000)
    assert one[:10] < later[:10] and one[10:] == later[10:]  # sorts by its instant
    with pytest.raises(ValueError):
        occurrence_id("report", -1)


# ---- reconciling ---------------------------------------------------------------------------


def test_reconcile_plans_a_new_schedule_with_its_next_occurrence_written(
    r: redis.Redis, declare: Callable[..., None]
) -> None:
    declare("tick", every=60)
    before = redis_ms(r)
    done = planner.reconcile()
    after = redis_ms(r)
    assert done.planned == ["tick"] and not done.failed
    found = stored("tick")
    assert found.next_ms is not None and found.next_ms % MINUTE == 0
    # the first minute after the plan's instant, which lies between the two reads (a plan
    # made just after a minute began, before's minute ending, is for the minute after it)
    assert before < found.next_ms <= after + MINUTE
    job_id = occurrence_id("tick", found.next_ms)
    assert found.job == job_id
    assert scheduled_at(r, job_id) == found.next_ms
    assert found.task == RECORD and found.source == "code"
    # a second start changes nothing: the same occurrence, the same job
    again = planner.reconcile()
    assert again.unchanged == ["tick"] and again.planned == []
    assert stored("tick").job == job_id
    assert r.zcard(queue_keys(Q).scheduled) == 1


def test_a_worker_whose_read_is_older_than_another_workers_step_leaves_the_schedule_on(
    r: redis.Redis, declare: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two delay workers start together: both read that no schedule is stored; the first
    plans the occurrence T1, and its pass moves the schedule on to T2 when T1 comes due; the
    second plans only then, from its old read. It must not put the schedule back on T1 (run
    already) and drop T2, which no worker would then run: the plan checks the occurrence it
    read, reads again and finds the schedule planned."""
    declare("tick", every=1)
    before = redis_ms(r)
    planner.reconcile()  # the first worker
    first = stored("tick").next_ms
    assert first is not None
    [fired] = planner.fire_due(Q, now_ms=first)  # its pass at T1
    second = stored("tick").next_ms
    assert second is not None and second > first and fired.at_ms == first
    # the second worker, with the read and the clock of before the first one planned
    monkeypatch.setattr(planner, "_stored_on", lambda queue: [])
    monkeypatch.setattr(planner, "redis_now", lambda: before)
    done = planner.reconcile()
    assert done.unchanged == ["tick"] and done.planned == [] and not done.failed
    assert stored("tick").next_ms == second and stored("tick").job == occurrence_id("tick", second)
    assert scheduled_at(r, occurrence_id("tick", second)) == second  # still to run


def test_a_plan_from_an_old_read_of_a_changed_schedule_is_made_again_from_a_new_one(
    r: redis.Redis, declare: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A changed declaration meets a record another worker planned since it was read: the
    re-plan is made from the record as it is now, and no occurrence is left behind."""
    clock = mid_hour(r, monkeypatch)
    declare("tick", every=60)
    planner.reconcile()
    first = stored("tick")
    assert first.next_ms == clock - 10_000 + MINUTE
    monkeypatch.setattr(declarations, "_in_code", {})
    declare("tick", every=3600)
    monkeypatch.setattr(planner, "_stored_on", lambda queue: [])  # read before the first plan
    assert planner.reconcile().planned == ["tick"]
    found = stored("tick")
    assert found.next_ms is not None and found.next_ms % 3_600_000 == 0
    assert scheduled_at(r, str(first.job)) is None  # the old plan's occurrence went
    assert r.zcard(queue_keys(Q).scheduled) == 1


def test_a_changed_rule_replans_and_removes_the_unclaimed_occurrence(
    r: redis.Redis, declare: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = mid_hour(r, monkeypatch)
    declare("tick", every=60)
    planner.reconcile()
    old_job = stored("tick").job
    assert old_job == occurrence_id("tick", clock - 10_000 + MINUTE)
    monkeypatch.setattr(declarations, "_in_code", {})
    declare("tick", every=3600)
    assert planner.reconcile().planned == ["tick"]
    found = stored("tick")
    assert found.next_ms is not None and found.next_ms % 3_600_000 == 0
    assert scheduled_at(r, str(old_job)) is None
    assert not r.hexists(queue_keys(Q).spec_bucket(str(old_job)), str(old_job))
    assert scheduled_at(r, occurrence_id("tick", found.next_ms)) == found.next_ms
    assert r.zcard(queue_keys(Q).scheduled) == 1


def test_changed_arguments_replan_the_same_occurrence_with_the_new_spec(
    r: redis.Redis, declare: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    mid_hour(r, monkeypatch)  # both plans in one hour, however close to its end they run
    declare("tick", every=3600, args=("old",))
    planner.reconcile()
    job_id = str(stored("tick").job)
    monkeypatch.setattr(declarations, "_in_code", {})
    declare("tick", every=3600, args=("new",))
    assert planner.reconcile().planned == ["tick"]
    assert stored("tick").job == job_id  # the same instant, the same job
    spec = r.hget(queue_keys(Q).spec_bucket(job_id), job_id)
    assert spec is not None and '["new"]' in spec


def test_a_schedule_declared_no_more_is_removed_with_its_occurrence(
    r: redis.Redis, declare: Callable[..., None], monkeypatch: pytest.MonkeyPatch
) -> None:
    declare("gone", every=60)
    planner.reconcile()
    job_id = str(stored("gone").job)
    monkeypatch.setattr(declarations, "_in_code", {})
    assert planner.reconcile().removed == ["gone"]
    assert schedules.stored(Q) == []
    assert not r.exists(queue_keys(Q).schedule("gone"))
    assert scheduled_at(r, job_id) is None


def test_a_schedule_that_cannot_be_built_is_reported_and_the_others_planned(
    declare: Callable[..., None],
) -> None:
    declare("bad", every=60, task="no.such.task")
    declare("good", every=60)
    done = planner.reconcile()
    assert done.planned == ["good"] and "bad" in done.failed
    assert "no.such.task" in done.failed["bad"]


# ---- firing --------------------------------------------------------------------------------


def test_many_workers_move_an_occurrence_on_exactly_once(
    r: redis.Redis, declare: Callable[..., None]
) -> None:
    declare("tick", every=60)
    planner.reconcile()
    seen = stored("tick").next_ms
    assert seen is not None
    ticks: list[planner.Tick] = []
    start = threading.Barrier(8)

    def worker() -> None:
        start.wait()
        ticks.extend(planner.fire_due(Q, now_ms=seen + 5))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(ticks) == 1
    [tick] = ticks
    assert (tick.at_ms, tick.runs, tick.missed, tick.lateness_ms) == (seen, True, 0, 5)
    assert tick.job_id == occurrence_id("tick", seen)
    found = stored("tick")
    assert found.next_ms == seen + MINUTE
    assert found.last == str(seen) and found.fired == 1
    # the occurrence that came due is still a scheduled job (the claim takes it); the next
    # one is written beside it
    assert scheduled_at(r, occurrence_id("tick", seen)) == seen
    assert scheduled_at(r, occurrence_id("tick", seen + MINUTE)) == seen + MINUTE
    assert planner.fire_due(Q, now_ms=seen + 10) == []  # nothing due any more


def test_schedules_due_together_move_on_chunk_by_chunk_past_a_broken_one(
    r: redis.Redis,
    declare: Callable[..., None],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(planner, "FIRE_CHUNK", 3)  # 7 schedules: 3 round trips of steps
    names = [f"many-{i}" for i in range(7)]
    for name in names:
        declare(name, every=60)
    planner.reconcile()
    seen = stored("many-0").next_ms
    assert seen is not None
    r.hset(queue_keys(Q).schedule("many-4"), ScheduleField.EVERY_MS, "not a number")
    ticks = planner.fire_due(Q, now_ms=seen + 5)
    moved = [name for name in names if name != "many-4"]
    assert sorted(tick.name for tick in ticks) == moved
    assert all(stored(name).next_ms == seen + MINUTE for name in moved)
    assert stored("many-4").next_ms == seen  # left where it was, and said
    assert "schedule many-4 on periodic cannot move on" in caplog.text
    assert planner.fire_due(Q, now_ms=seen + 10) == []


def test_missed_once_runs_the_first_missed_occurrence_once_and_counts_the_rest(
    r: redis.Redis, declare: Callable[..., None]
) -> None:
    declare("tick", every=60, missed="once")
    planner.reconcile()
    seen = stored("tick").next_ms
    assert seen is not None
    [tick] = planner.fire_due(Q, now_ms=seen + 10 * MINUTE + 5)
    assert tick.runs and tick.missed == 10
    assert stored("tick").next_ms == seen + 11 * MINUTE
    assert scheduled_at(r, occurrence_id("tick", seen)) == seen  # runs, once, now
    assert stored("tick").missed_count == 10


def test_missed_all_runs_each_missed_occurrence_up_to_the_limit(
    r: redis.Redis, declare: Callable[..., None]
) -> None:
    declare("tick", every=60, missed="all")
    planner.reconcile()
    seen = stored("tick").next_ms
    assert seen is not None
    now = seen + 3 * MINUTE + 5
    ticks = []
    for _ in range(10):
        ticks += planner.fire_due(Q, now_ms=now)
    assert [t.at_ms for t in ticks] == [seen + i * MINUTE for i in range(4)]
    assert all(t.runs and t.missed == 0 for t in ticks)
    assert stored("tick").next_ms == seen + 4 * MINUTE
    for i in range(4):
        assert scheduled_at(r, occurrence_id("tick", seen + i * MINUTE)) is not None
    # more missed than the limit: the latest MISSED_ALL_LIMIT run, the earlier are counted
    far = seen + 4 * MINUTE + (planner.MISSED_ALL_LIMIT + 50) * MINUTE
    [first] = planner.fire_due(Q, now_ms=far)
    assert first.missed == 50
    assert stored("tick").next_ms == seen + (4 + 51) * MINUTE


def test_missed_skip_removes_the_late_occurrence_unrun(
    r: redis.Redis, declare: Callable[..., None]
) -> None:
    declare("tick", every=60, missed="skip")
    planner.reconcile()
    seen = stored("tick").next_ms
    assert seen is not None
    [tick] = planner.fire_due(Q, now_ms=seen + 5 * MINUTE + 5)
    assert not tick.runs and tick.missed == 6  # the five in between and the one found late
    assert scheduled_at(r, occurrence_id("tick", seen)) is None
    assert stored("tick").next_ms == seen + 6 * MINUTE
    assert stored("tick").fired == 0


def test_a_skip_schedule_found_on_time_runs(declare: Callable[..., None], r: redis.Redis) -> None:
    declare("tick", every=60, missed="skip")
    planner.reconcile()
    seen = stored("tick").next_ms
    assert seen is not None
    [tick] = planner.fire_due(Q, now_ms=seen + 100)
    assert tick.runs and tick.missed == 0
    assert scheduled_at(r, occurrence_id("tick", seen)) == seen


def test_a_cron_schedule_in_a_timezone_plans_its_wall_time(declare: Callable[..., None]) -> None:
    declare("report", cron="0 6 * * *", timezone="Europe/Berlin")
    planner.reconcile()
    found = stored("report")
    assert found.next_ms is not None
    from datetime import datetime
    from zoneinfo import ZoneInfo

    local = datetime.fromtimestamp(found.next_ms / 1000, tz=ZoneInfo("Europe/Berlin"))
    assert (local.hour, local.minute, local.second) == (6, 0, 0)
    assert found.timezone == "Europe/Berlin"


# ---- operating -----------------------------------------------------------------------------


def test_pause_resume_and_run_now(r: redis.Redis, declare: Callable[..., None]) -> None:
    declare("tick", every=60)
    planner.reconcile()
    job_id = str(stored("tick").job)
    assert schedule_service.pause("tick") is True
    assert schedule_service.pause("tick") is False
    assert scheduled_at(r, job_id) is None and stored("tick").paused
    assert planner.fire_due(Q, now_ms=redis_ms(r) + 10 * MINUTE) == []  # paused: never due
    assert planner.reconcile().unchanged == ["tick"]  # a start does not resume it
    [view] = schedule_service.all_schedules()
    assert view.paused and view.next_runs == []
    before = redis_ms(r)
    assert schedule_service.resume("tick") is True
    found = stored("tick")
    assert found.next_ms is not None and found.next_ms > before and not found.paused
    assert scheduled_at(r, occurrence_id("tick", found.next_ms)) == found.next_ms
    extra = schedule_service.run_now("tick")
    assert extra is not None and extra != found.job
    due = scheduled_at(r, extra)
    assert due is not None and due <= redis_ms(r)


def test_the_schedules_view_gives_the_next_five_runs_and_the_last_outcome(
    declare: Callable[..., None],
) -> None:
    declare("tick", every=60)
    planner.reconcile()
    seen = stored("tick").next_ms
    assert seen is not None
    planner.fire_due(Q, now_ms=seen + 1)
    [view] = schedule_service.all_schedules()
    assert view.rule_in_words and view.rule
    assert [int(m.timestamp() * 1000) for m in view.next_runs] == [
        seen + i * MINUTE for i in range(1, 6)
    ]
    assert view.last_job == occurrence_id("tick", seen)
    assert view.last_outcome == "waiting"  # scheduled, no worker claimed it here
    assert (view.fired, view.missed) == (1, 0)


@pytest.mark.django_db
def test_the_admin_schedules_page_and_its_permissions(
    django_user_model: Any, declare: Callable[..., None], r: redis.Redis
) -> None:
    declare("tick", every=60)
    planner.reconcile()
    viewer = user_client(django_user_model, "viewer", "view_jobs")
    page = viewer.get(url("schedules"))
    assert page.status_code == 200
    body = text(page)
    # the task wraps at its dots (<wbr>) in its column
    assert "tick" in body and RECORD.replace(".", ".<wbr>") in body and "every" in body.lower()
    assert body.count("<li><time") == 5
    assert 'value="pause"' not in body  # no permission, no button
    assert viewer.post(url("schedule_act"), {"action": "pause", "name": "tick"}).status_code == 403
    assert not stored("tick").paused
    pauser = user_client(django_user_model, "pauser", "view_jobs", "pause_schedules")
    assert (
        pauser.post(url("schedule_act"), {"action": "run_now", "name": "tick"}).status_code == 403
    )
    done = pauser.post(url("schedule_act"), {"action": "pause", "name": "tick"}, follow=True)
    assert done.status_code == 200 and "Schedule tick paused." in text(done)
    assert stored("tick").paused
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(django_user_model.objects.get(username="pauser"))
    refused = strict.post(url("schedule_act"), {"action": "resume", "name": "tick"})
    assert refused.status_code == 403 and stored("tick").paused  # no CSRF token
    missing = pauser.post(url("schedule_act"), {"action": "pause", "name": "nope"})
    assert missing.status_code == 404
    assert viewer.get(url("changelist")).status_code == 200
    assert url("schedules") in text(viewer.get(url("changelist")))


def test_the_command_line_lists_and_acts(r: redis.Redis, declare: Callable[..., None]) -> None:
    declare("tick", every=60)
    planner.reconcile()
    out = StringIO()
    call_command("delayqueue", "schedules", "list", "--json", stdout=out)
    [listed] = json.loads(out.getvalue())
    assert listed["name"] == "tick" and len(listed["next_runs"]) == 5 and not listed["paused"]
    out = StringIO()
    call_command("delayqueue", "schedules", "pause", "tick", "--yes", stdout=out)
    assert "paused" in out.getvalue() and stored("tick").paused
    call_command("delayqueue", "schedules", "resume", "tick", stdout=StringIO())
    assert not stored("tick").paused
    with pytest.raises(CommandError) as failed:
        call_command("delayqueue", "schedules", "run-now", "nope", "--yes", stdout=StringIO())
    assert failed.value.returncode == 1
    with pytest.raises(CommandError) as usage:
        call_command("delayqueue", "schedules", "pause", stdout=StringIO())
    assert usage.value.returncode == 2


# ---- declaring -----------------------------------------------------------------------------


def _check_ids(schedules_setting: Any) -> set[str]:
    with override_settings(
        DELAYQUEUE={"REDIS_URL": "redis://127.0.0.1:1/0", "SCHEDULES": schedules_setting}
    ):
        return {m.id for m in run_checks() if m.id and m.id.startswith("delayqueue.E02")}


def test_system_checks_reject_bad_schedules() -> None:
    assert _check_ids({"a": {"task": RECORD, "every": 60}}) == set()
    assert _check_ids({"a": {"task": RECORD, "cron": "61 * * * *"}}) == {"delayqueue.E020"}
    assert _check_ids({"a": {"task": RECORD, "cron": "0 6 * * *", "timezone": "Mars/Olympus"}}) == {
        "delayqueue.E020"
    }
    assert _check_ids({"a": {"task": "no.such.task", "every": 60}}) == {"delayqueue.E022"}
    assert _check_ids({"a": {"task": RECORD, "every": 60, "args": [object()]}}) == {
        "delayqueue.E022"
    }
    assert _check_ids({"a": {"task": RECORD}}) == {"delayqueue.E020"}  # neither cron nor every


def test_a_name_declared_twice_is_a_check_error(declare: Callable[..., None]) -> None:
    declare("report", every=60)
    assert _check_ids({"report": {"task": RECORD, "every": 120}}) == {"delayqueue.E021"}


def test_periodic_task_checks_its_rule_where_it_is_declared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from delayqueue import periodic_task
    from delayqueue.errors import InvalidOption

    monkeypatch.setattr(declarations, "_in_code", {})
    with pytest.raises(InvalidOption):
        periodic_task(cron="not a cron line")
    with pytest.raises(InvalidOption):
        periodic_task(every=60, timezone="Nowhere/Land")
    with pytest.raises(InvalidOption):
        periodic_task(every=60, missed="sometimes")
    with pytest.raises(InvalidOption):
        periodic_task(cron="0 6 * * *", every=60)

    @periodic_task(every=30, queue=Q, name="half-minute")
    def half_minute() -> None:
        """A periodic task made in a test."""

    [declared] = declarations.declared()
    assert (declared.name, declared.every_ms, declared.source) == ("half-minute", 30_000, "code")
    assert declared.task.endswith("half_minute")
    assert declared.build()[0] == Q


# ---- metrics -------------------------------------------------------------------------------


def test_a_tick_is_counted_with_its_lateness(declare: Callable[..., None]) -> None:
    import delayqueue.observability.metrics  # noqa: F401 (connects the receivers)

    declare("tick", every=60)
    planner.reconcile()
    seen = stored("tick").next_ms
    assert seen is not None
    labels = {"queue": Q, "schedule": "tick", "runs": "true"}
    before = REGISTRY.get_sample_value("delayqueue_schedule_ticks_total", labels) or 0
    lateness = {"queue": Q}
    count_before = (
        REGISTRY.get_sample_value("delayqueue_schedule_tick_lateness_seconds_count", lateness) or 0
    )
    planner.fire_due(Q, now_ms=seen + 250)
    assert REGISTRY.get_sample_value("delayqueue_schedule_ticks_total", labels) == before + 1
    after = REGISTRY.get_sample_value("delayqueue_schedule_tick_lateness_seconds_count", lateness)
    assert after == count_before + 1


# ---- end to end ----------------------------------------------------------------------------


def _ticks(r: redis.Redis, tag: str) -> list[float]:
    return sorted(run["at"] for run in _runs(r, tag))


def _runs(r: redis.Redis, tag: str) -> list[dict[str, Any]]:
    runs = [json.loads(raw) for raw in r.lrange(jobs.RAN, 0, -1)]
    return [run for run in runs if run["tag"] == tag]


def _occurrence(name: str, job_id: str, at: float) -> int:
    """The whole second (ms) whose occurrence of ``name`` is job ``job_id``, which ran at
    ``at``: one of the few seconds before its run (its id is the schedule's and the
    instant's)."""
    for second in range(int(at), int(at) - 5, -1):
        if occurrence_id(name, second * 1000) == job_id:
            return second * 1000
    raise AssertionError(f"job {job_id}, run at {at}, is no occurrence of {name} just before")


def test_two_delay_workers_run_an_every_second_schedule_once_per_tick(
    r: redis.Redis, celery_worker: Any, delay_worker: Callable[..., Any]
) -> None:
    setting = {"every-second": {"task": RECORD, "every": 1, "args": ["tick"], "queue": "tests"}}
    env = {"DQ_TEST_SCHEDULES": json.dumps(setting)}
    workers = [delay_worker("--queues", "tests", env=env) for _ in range(2)]
    wait_for(lambda: len(_ticks(r, "tick")) >= 6, 30)
    for worker in workers:
        worker.stop()
    [found] = schedules.stored("tests", "every-second")
    fired = found.fired
    wait_for(lambda: len(_ticks(r, "tick")) >= fired, 15)  # the last ones may still run
    time.sleep(0.5)
    runs = _runs(r, "tick")
    assert len(runs) == fired  # every occurrence that came due ran, and ran once
    # Each run is known by its job, the occurrence of its whole second (the wall clock
    # between two runs says nothing of a tick lost or run twice: on a loaded machine one
    # start may come late and the next on time)
    known = [(_occurrence("every-second", run["job"], run["at"]), run["at"]) for run in runs]
    ticks = sorted(tick for tick, _ in known)
    assert len(set(ticks)) == len(ticks), ticks  # no second run of a tick
    assert ticks == list(range(ticks[0], ticks[0] + 1000 * len(ticks), 1000)), ticks  # none lost
    late = sorted(at * 1000 - tick for tick, at in known)
    assert late[0] >= 0, late  # none ran before its second
    assert late[len(late) // 2] < 500, late  # and they start just after it
