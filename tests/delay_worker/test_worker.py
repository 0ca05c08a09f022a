"""The delay worker in-process: sleeping, bad data, broker outages, the command."""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from delayqueue.engine.execution import get_scripts
from delayqueue.engine.keys import current_minute, new_job_id, queue_keys
from delayqueue.signals import SENDER_DELAY_WORKER
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.celery_apps import celery_app_on, parked_broker_url
from tests.support.recording import recording
from tests.support.redis_server import free_port

Q = queue_keys("tests")
BROKER_QUEUE = "celery"  # Celery's default queue list on the broker


def broker() -> redis.Redis:
    return redis.Redis.from_url(parked_broker_url(), decode_responses=True)


@pytest.fixture(autouse=True)
def parked(parked_celery: Celery) -> Celery:
    return parked_celery


def test_pass_claims_due_jobs_and_publishes_them_to_celery(r: redis.Redis, parked: Celery) -> None:
    due = jobs.record.delay_for("now", seconds=0, on_commit=False)
    later = jobs.record.delay_for("later", seconds=30, on_commit=False)
    with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "SAFETY_POLL": 60}):
        result = DelayWorker(["tests"], celery_app=parked).run_pass()
    assert [job.id for job in result.claimed] == [due.id]
    assert r.zscore(Q.inflight, due.id) is not None
    assert broker().llen(BROKER_QUEUE) == 1
    # it will sleep until the later job is due, not a fixed poll
    assert 25_000 < result.wait_ms <= 30_000
    assert r.zscore(Q.scheduled, later.id) is not None


def test_a_pass_claims_what_is_due_within_dispatch_ahead_and_wakes_that_early(
    r: redis.Redis, parked: Celery
) -> None:
    ahead = {**settings.DELAYQUEUE, "SAFETY_POLL": 60, "DISPATCH_AHEAD": 1}
    # Both workers made, and their connections, before the jobs: a loaded machine takes a
    # while to make them, and the first job is due in 0.9 s.
    with override_settings(DELAYQUEUE={**ahead, "DISPATCH_AHEAD": 0}):
        plain = DelayWorker(["tests"], celery_app=parked)
    with override_settings(DELAYQUEUE=ahead):
        early = DelayWorker(["tests"], celery_app=parked)
        assert plain.run_pass().claimed == [] and early.run_pass().claimed == []
        soon = jobs.record.delay_for("soon", seconds=0.9, on_commit=False)
        later = jobs.record.delay_for("later", seconds=30, on_commit=False)
        assert plain.run_pass().claimed == []
        result = early.run_pass()
    assert [job.id for job in result.claimed] == [soon.id]
    job = result.claimed[0]
    assert job.due_ms is not None and job.claimed_ms is not None
    assert 0 < job.due_ms - job.claimed_ms <= 900  # handed over ahead, with its due time
    assert broker().llen(BROKER_QUEUE) == 1
    assert 25_000 < result.wait_ms <= 29_000  # it wakes 1 s before the later job is due
    assert r.zscore(Q.scheduled, later.id) is not None


def test_the_celery_side_holds_a_job_dispatched_ahead_until_its_due_time_by_redis_clock() -> None:
    """``begin`` returns Redis's clock (microseconds); the hold is the due time minus it,
    counted from the reply, so this host's clock does not matter."""
    from delayqueue.runner.attempt import hold_until_due

    def held(due_ms: int | None, begun_us: int | None, replied_ago: float = 0.0) -> float:
        started = time.monotonic()
        hold_until_due(due_ms, begun_us, started - replied_ago)
        return time.monotonic() - started

    redis_ms = 5_000_000  # any clock: only due - begun counts
    assert 0.08 <= held(redis_ms + 80, redis_ms * 1000) < 0.5
    # to the microsecond: begun 0.9 ms into Redis's ms, the hold is 0.1 ms shorter than 1 ms
    assert 0.0009 <= held(redis_ms + 1, redis_ms * 1000 + 100) < 0.05
    # the time since the reply arrived is part of the hold
    assert 0.03 <= held(redis_ms + 80, redis_ms * 1000, replied_ago=0.05) < 0.075
    # never more than MAX_DISPATCH_AHEAD (1 s), whatever a message's header says
    assert 0.999 <= held(redis_ms + 3_600_000, redis_ms * 1000) < 1.5
    # begun at or after its due time, or without the times: not held
    assert held(redis_ms, redis_ms * 1000) < 0.01
    assert held(redis_ms, redis_ms * 1000 + 1) < 0.01
    assert held(None, redis_ms * 1000) < 0.01
    assert held(redis_ms + 80, None) < 0.01


def test_an_attempt_held_until_its_due_time_decides_its_spans_and_monitors_before_the_hold(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What ``around_attempt`` costs (the tracer provider looked up, the monitored schedule
    found) is paid while the job waits for its due time: after the hold, only the task."""
    from delayqueue.runner import attempt as attempts

    seen: dict[str, float] = {}
    around = attempts.around_attempt

    def timed_around(*args: Any) -> Any:
        seen["around"] = time.monotonic()
        return around(*args)

    class Kept:
        def add(self, call: object, report: object, unsent: str) -> None:
            seen["settled"] = time.monotonic()

    monkeypatch.setattr(attempts, "around_attempt", timed_around)
    redis_ms = 5_000_000
    attempt = attempts.Attempt(
        queue_keys("q"), "q", "J", "tok", "t", 1, due_ms=redis_ms + 80, claimed_ms=None,
        begun_us=redis_ms * 1000, replied=time.monotonic(),
    )  # fmt: skip
    outcome = attempts.run_attempt(
        attempt, lambda: seen.setdefault("ran", time.monotonic()), None, Kept()
    )
    assert outcome.succeeded
    assert seen["ran"] - seen["around"] >= 0.07  # decided before the 80 ms hold


def test_a_pass_after_redis_lost_only_some_scripts_keeps_what_it_claimed(
    r: redis.Redis, parked: Celery
) -> None:
    """Redis knows the claim script but not the reap script (another process loaded only
    one since a restart): the claim must not run twice, or its jobs would be lost to this
    pass and sit in flight until their visibility deadline."""
    due = jobs.record.delay_for("now", seconds=0, on_commit=False)
    r.script_flush()
    r.script_load(get_scripts().claim.script)
    result = DelayWorker(["tests"], celery_app=parked).run_pass()
    assert [job.id for job in result.claimed] == [due.id]
    assert broker().llen(BROKER_QUEUE) == 1


def test_pass_wakes_for_the_next_inflight_deadline(r: redis.Redis) -> None:
    jobs.record.delay_for("now", seconds=0, on_commit=False)
    worker = DelayWorker(["tests"], visibility_timeout=3)
    assert 0 < worker.run_pass().wait_ms <= 3_000


def test_unknown_task_and_corrupt_data_go_to_dead(r: redis.Redis, parked: Celery) -> None:
    good = jobs.record.delay_for("ok", seconds=0, on_commit=False)
    # (real job ids: an id that is not one is buried for that alone, test_claim_hostile.py)
    unknown, badjson, notlist, nohash = (new_job_id() for _ in range(4))
    bad = {
        unknown: {"task": "no.such.task", "args": "[]", "max": "3"},
        badjson: {"task": "tests.support.jobs.record", "args": "[not json", "max": "3"},
        notlist: {"task": "tests.support.jobs.record", "args": '{"a": 1}', "max": "3"},
    }
    for job_id, data in bad.items():
        for field, value in data.items():
            r.hset(Q.job(job_id), field, value)
        r.zadd(Q.scheduled, {job_id: 0})
    r.zadd(Q.scheduled, {nohash: 0})
    DelayWorker(["tests"], celery_app=parked).run(once=True)
    dead = set(r.zrange(Q.dead, 0, -1))
    assert dead == {unknown, badjson, notlist, nohash}
    assert "unknown task 'no.such.task'" in str(r.hget(Q.job(unknown), "why"))
    assert "corrupt" in str(r.hget(Q.job(badjson), "why"))
    assert r.zscore(Q.inflight, good.id) is not None  # the good job went on
    assert broker().llen(BROKER_QUEUE) == 1


def test_a_pickled_payload_is_never_loaded(r: redis.Redis, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (Path.touch, (str(marker),))

    r.hset(
        Q.job("PICKLE"),
        mapping={"task": "tests.support.jobs.record", "args": pickle.dumps(Exploit())},
    )
    r.zadd(Q.scheduled, {"PICKLE": 0})
    DelayWorker(["tests"]).run(once=True)
    assert r.zscore(Q.dead, "PICKLE") is not None
    assert not marker.exists()


def test_broker_outage_puts_jobs_back_with_backoff(r: redis.Redis) -> None:
    job = jobs.record.delay_for("x", seconds=0, on_commit=False)
    dead_broker = celery_app_on(f"redis://127.0.0.1:{free_port()}/0")
    dead_broker.conf.broker_connection_timeout = 0.5
    dead_broker.conf.broker_transport_options = {"max_retries": 0}
    dead_broker.conf.task_publish_retry = False
    worker = DelayWorker(["tests"], celery_app=dead_broker)
    with recording() as recorder:
        worker.run_pass()
    [released] = recorder.of("released")  # the give-back reports itself
    assert released["queue"] == "tests" and released["job_id"] == job.id
    assert "broker unavailable" in released["reason"] and released["delay_ms"] >= 1_000
    assert recorder.senders("released") == {SENDER_DELAY_WORKER}
    now = int(r.time()[0]) * 1000
    score = r.zscore(Q.scheduled, job.id)
    assert score is not None and score > now  # back, due after a backoff
    assert r.zcard(Q.inflight) == 0
    assert r.hget(Q.job(job.id), "att") == "0"  # the attempt was given back
    assert "broker unavailable" in str(r.hget(Q.job(job.id), "hist"))


def test_paused_queue_is_not_claimed(r: redis.Redis) -> None:
    jobs.record.delay_for("x", seconds=0, on_commit=False)
    r.set(Q.paused, "1")
    assert DelayWorker(["tests"]).run_pass().claimed == []
    r.delete(Q.paused)
    assert len(DelayWorker(["tests"]).run_pass().claimed) == 1


def test_worker_finds_queues_when_none_are_given(r: redis.Redis) -> None:
    jobs.record.delay_for("x", seconds=0, on_commit=False, key="k")
    worker = DelayWorker()
    worker.run(once=True)
    assert "tests" in worker.queues and "orders" in worker.queues
    assert r.zcard(Q.inflight) == 1


def test_once_drains_every_due_job(r: redis.Redis, parked: Celery) -> None:
    # One message per job (batch=1): nobody consumes the parked broker, so after a few
    # messages the worker would find the Celery side behind and batch the rest.
    jobs.unbatched.delay_many([(f"j{i}",) for i in range(25)], seconds=0, on_commit=False)
    DelayWorker(["tests"], claim_size=10, celery_app=parked).run(once=True)
    assert r.zcard(Q.scheduled) == 0 and r.zcard(Q.inflight) == 25
    assert broker().llen(BROKER_QUEUE) == 25


def test_once_command(r: redis.Redis) -> None:
    jobs.record.delay_many([(f"j{i}",) for i in range(5)], seconds=0, on_commit=False)
    jobs.record.delay_for("later", seconds=60, on_commit=False)
    first = current_minute()
    call_command("run_delay_worker", "--queues", "tests", "--once")
    assert r.zcard(Q.scheduled) == 1  # only the job that is not due yet
    # counted in the stats hash of the minute of its claim: any minute the command ran in
    minutes = range(first, current_minute() + 1)
    assert sum(int(r.hget(Q.stats(m), "dispatched") or 0) for m in minutes) == 5


def test_the_old_name_of_claim_size_still_works_and_says_it_is_renamed(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs.record.delay_many([(f"j{i}",) for i in range(3)], seconds=0, on_commit=False)
    call_command("run_delay_worker", "--queues", "tests", "--batch-size", "2", "--once")
    assert "--batch-size is renamed --claim-size" in capsys.readouterr().err
    assert r.zcard(Q.scheduled) == 0  # every due job went
    with pytest.raises(CommandError, match="--claim-size"):
        call_command("run_delay_worker", "--batch-size", "0", "--once")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--queues", "bad name"], "queue name"),
        (["--claim-size", "0"], "--claim-size"),
        (["--visibility-timeout", "-1"], "--visibility-timeout"),
    ],
)
def test_command_rejects_bad_options(options: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("run_delay_worker", *options, "--once")


def test_run_side_skips_a_stale_dispatch_and_acks_a_current_one(
    r: redis.Redis, parked: Celery
) -> None:
    job = jobs.record.delay_for("fenced", seconds=0, on_commit=False, key="f")
    [claimed] = DelayWorker(["tests"], celery_app=parked).run_pass().claimed
    headers = {"dq_queue": "tests", "dq_id": job.id}
    jobs.record.apply(args=("fenced",), headers={**headers, "dq_token": "0"})
    assert jobs.ran("record") == []  # stale token: the function did not run
    assert r.zscore(Q.inflight, job.id) is not None
    jobs.record.apply(args=("fenced",), headers={**headers, "dq_token": claimed.token})
    assert [run["tag"] for run in jobs.ran("record")] == ["fenced"]
    assert not r.exists(Q.job(job.id)) and r.hget(Q.dedupe, "f") is None


def test_run_side_records_a_failure_for_retry(r: redis.Redis, parked: Celery) -> None:
    job = jobs.always_fails.delay_for("x", seconds=0, on_commit=False)
    [claimed] = DelayWorker(["tests"], celery_app=parked).run_pass().claimed
    headers = {"dq_queue": "tests", "dq_id": job.id, "dq_token": claimed.token}
    result = jobs.always_fails.apply(args=("x",), headers=headers)
    assert isinstance(result.result, ValueError)
    assert r.zscore(Q.scheduled, job.id) is not None  # back, after a 50 ms backoff
    assert r.hget(Q.job(job.id), "err") == "ValueError: boom x"


def test_backoff_grows_exponentially_with_jitter_and_a_cap() -> None:
    from delayqueue.runner.attempt import backoff_ms

    for attempt, base_ms in [(1, 10_000), (2, 20_000), (3, 40_000)]:
        assert 0.8 * base_ms <= backoff_ms(attempt, None) <= 1.2 * base_ms
    assert backoff_ms(30, None) <= 1.2 * 3_600_000
    assert backoff_ms(3, lambda attempt: attempt * 1.5) == 4500
    assert 0.8 * 400 <= backoff_ms(3, 0.1) <= 1.2 * 400
