"""Signals and log lines of each transition, sent by real transitions in this process: the
client API, a delay worker's pass (publishing to a parked broker) and the Celery side
(``task.apply`` with a dispatch's headers)."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

import delayqueue
from delayqueue import signals
from delayqueue.celery_app import get_celery_app
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.recording import Recorder, recording

Q = queue_keys("tests")


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with recording() as recorder:
        yield recorder


def claim(parked: Celery) -> Any:
    [claimed] = DelayWorker(["tests"], celery_app=parked).run_pass().claimed
    return claimed


def headers_of(claimed: Any) -> dict[str, str]:
    return {
        "dq_queue": claimed.queue,
        "dq_id": claimed.id,
        "dq_token": claimed.token,
        "dq_claimed": str(claimed.claimed_ms),
    }


def test_client_signals_scheduled_cancelled_rescheduled(r: redis.Redis, recorder: Recorder) -> None:
    job = jobs.record.delay_for("a", seconds=30, key="k", on_commit=False)
    kept = jobs.record.delay_for("b", seconds=60, key="k", on_commit=False)
    [created, again] = recorder.of("scheduled")
    due = r.zscore(Q.scheduled, job.id)
    assert created == {
        "queue": "tests",
        "job_id": job.id,
        "task": "tests.support.jobs.record",
        "due_ms": due,
        "key": "k",
        "outcome": "created",
    }
    assert again["outcome"] == "kept" and again["job_id"] == kept.id == job.id
    assert recorder.senders("scheduled") == {signals.SENDER_CLIENT}

    moved = delayqueue.reschedule("tests", job.id, delay=120)
    assert moved is not None
    [rescheduled] = recorder.of("rescheduled")
    assert rescheduled == {
        "queue": "tests",
        "job_id": job.id,
        "due_ms": r.zscore(Q.scheduled, job.id),
        "key": None,
    }
    assert delayqueue.cancel("tests", key="k")
    assert recorder.of("cancelled") == [{"queue": "tests", "job_id": job.id, "key": "k"}]
    assert not delayqueue.cancel("tests", job.id)  # nothing removed: no signal
    assert len(recorder.of("cancelled")) == 1


def test_delay_many_sends_one_scheduled_per_job(r: redis.Redis, recorder: Recorder) -> None:
    made = jobs.record.delay_many([(f"j{i}",) for i in range(7)], seconds=5, on_commit=False)
    sent = recorder.of("scheduled")
    assert [s["job_id"] for s in sent] == [job.id for job in made]
    assert {s["outcome"] for s in sent} == {"created"}


def test_worker_signals_dispatched_dead_and_reaped(
    r: redis.Redis, recorder: Recorder, parked_celery: Celery
) -> None:
    job = jobs.record.delay_for("d", seconds=0, on_commit=False)
    unknown = new_job_id()  # (a real id: one that is not is buried for that alone)
    r.hset(Q.job(unknown), mapping={"task": "no.such.task", "args": "[]", "max": "3"})
    r.zadd(Q.scheduled, {unknown: 0})
    worker = DelayWorker(["tests"], celery_app=parked_celery, visibility_timeout=0.1)
    worker.run_pass()
    [dispatched] = recorder.of("dispatched")
    lateness = dispatched.pop("lateness_ms")
    assert dispatched == {
        "queue": "tests",
        "job_id": job.id,
        "task": "tests.support.jobs.record",
        "attempt": 1,
    }
    assert isinstance(lateness, int) and 0 <= lateness < 5_000  # claim time - due time
    [dead] = recorder.of("dead")
    assert dead["job_id"] == unknown and dead["cause"] == "buried"
    assert dead["task"] == "no.such.task" and "unknown task" in dead["reason"]
    assert recorder.senders("dispatched") == recorder.senders("dead") == {"delay_worker"}

    time.sleep(0.2)  # past the visibility deadline: never started, so reaped
    worker.run_pass()
    assert recorder.of("reaped") == [{"queue": "tests", "rescheduled": 1, "dead": 0}]


def test_a_large_dispatch_logs_one_info_line_and_still_signals_each_job(
    r: redis.Redis,
    recorder: Recorder,
    caplog: pytest.LogCaptureFixture,
    parked_celery: Celery,
) -> None:
    from delayqueue.observability.events import LOG_EACH_DISPATCH

    count = LOG_EACH_DISPATCH + 5
    made = jobs.record.delay_many([(f"b{i}",) for i in range(count)], seconds=0, on_commit=False)
    with caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    lines = [rec for rec in caplog.records if getattr(rec, "transition", "") == "dispatched"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert lines[0].count == count and lines[0].queue == "tests"  # type: ignore[attr-defined]
    assert f"{count} jobs dispatched from tests" in lines[0].getMessage()
    assert re.search(
        r"median \d+ ms after its due time, latest \d+ ms after", lines[0].getMessage()
    )
    assert sorted(s["job_id"] for s in recorder.of("dispatched")) == sorted(j.id for j in made)

    few = jobs.record.delay_many([(f"f{i}",) for i in range(3)], seconds=0, on_commit=False)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    lines = [rec for rec in caplog.records if getattr(rec, "transition", "") == "dispatched"]
    assert sorted(rec.job_id for rec in lines) == sorted(j.id for j in few)  # type: ignore[attr-defined]


def test_celery_side_signals_started_succeeded(
    r: redis.Redis, recorder: Recorder, parked_celery: Celery
) -> None:
    job = jobs.record.delay_for("s", seconds=0, on_commit=False)
    claimed = claim(parked_celery)
    jobs.record.apply(args=("s",), headers=headers_of(claimed))
    [started] = recorder.of("started")
    assert started["job_id"] == job.id and started["task"] == "tests.support.jobs.record"
    assert started["attempt"] == 1 and started["lateness_ms"] is None
    assert 0 <= started["wait_ms"] < 5_000  # claimed -> started, across the test's own clock
    [succeeded] = recorder.of("succeeded")
    assert succeeded["job_id"] == job.id and succeeded["acked"] is True
    assert succeeded["attempt"] == 1 and 0 <= succeeded["runtime"] < 5
    assert recorder.senders("succeeded") == {"celery_worker"}


def test_plain_task_run_by_run_task_is_named_by_its_own_name(
    r: redis.Redis, recorder: Recorder, parked_celery: Celery
) -> None:
    delayqueue.enqueue("tests.support.jobs.plain", ["p"], delay=0, queue="tests", on_commit=False)
    claimed = claim(parked_celery)
    run_task = get_celery_app().tasks["delayqueue.run_task"]
    run_task.apply(args=("tests.support.jobs.plain", ["p"], {}), headers=headers_of(claimed))
    assert [s["task"] for s in recorder.of("started")] == ["tests.support.jobs.plain"]
    assert [s["task"] for s in recorder.of("succeeded")] == ["tests.support.jobs.plain"]


def test_celery_side_signals_failed_retry_then_dead(
    r: redis.Redis, recorder: Recorder, parked_celery: Celery
) -> None:
    job = delayqueue.enqueue(jobs.always_fails, ["f"], delay=0, max_attempts=2, on_commit=False)
    for attempt in (1, 2):
        if attempt == 2:
            r.zadd(Q.scheduled, {job.id: 0})  # due now, not after the backoff
        jobs.always_fails.apply(args=("f",), headers=headers_of(claim(parked_celery)))
    retry, last = recorder.of("failed")
    assert retry["outcome"] == "retry" and retry["attempt"] == 1
    assert (
        isinstance(retry["exception"], ValueError)
        and retry["task"] == "tests.support.jobs.always_fails"
    )
    assert last["outcome"] == "dead" and last["attempt"] == 2
    [dead] = recorder.of("dead")
    assert dead == {
        "queue": "tests",
        "job_id": job.id,
        "task": "tests.support.jobs.always_fails",
        "attempt": 2,
        "reason": "ValueError: boom f",
        "cause": "failed",
    }
    assert recorder.senders("dead") == {"celery_worker"}
    assert r.zscore(Q.dead, job.id) is not None


def test_a_receiver_that_raises_never_breaks_the_transition(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, parked_celery: Celery
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    for signal in signals.ALL.values():
        signal.connect(broken)
    try:
        with caplog.at_level(logging.ERROR, logger="delayqueue.signals"):
            job = jobs.record.delay_for("x", seconds=0, on_commit=False)
            claimed = claim(parked_celery)
            result = jobs.record.apply(args=("x",), headers=headers_of(claimed))
    finally:
        for signal in signals.ALL.values():
            signal.disconnect(broken)
    assert result.result == "x"  # the task ran and returned
    assert not r.exists(Q.job(job.id)) and r.zcard(Q.inflight) == 0  # and was acked
    raised = [rec for rec in caplog.records if rec.name == "delayqueue.signals"]
    assert {rec.transition for rec in raised} >= {  # type: ignore[attr-defined]
        "scheduled",
        "dispatched",
        "started",
        "succeeded",
    }
    assert all("receiver bug" in rec.getMessage() for rec in raised)


def test_transitions_are_logged_with_their_fields_as_extras(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, parked_celery: Celery
) -> None:
    with caplog.at_level(logging.DEBUG, logger="delayqueue.jobs"):
        job = jobs.always_fails.delay_for("x", seconds=0, on_commit=False)
        claimed = claim(parked_celery)
        jobs.always_fails.apply(args=("x",), headers=headers_of(claimed))
    lines = {rec.transition: rec for rec in caplog.records if rec.name == "delayqueue.jobs"}  # type: ignore[attr-defined]
    assert set(lines) == {"scheduled", "dispatched", "started", "failed"}
    assert lines["scheduled"].levelno == logging.INFO
    assert lines["dispatched"].levelno == logging.INFO
    assert lines["started"].levelno == logging.DEBUG
    assert lines["failed"].levelno == logging.WARNING
    for rec in lines.values():
        fields = {
            name: getattr(rec, name)
            for name in ("job_id", "queue", "task", "attempt", "lateness_ms")
        }
        assert fields["job_id"] == job.id and fields["queue"] == "tests"
        assert fields["task"] == "tests.support.jobs.always_fails"
        assert job.id in rec.getMessage()
    assert lines["dispatched"].attempt == 1  # type: ignore[attr-defined]
    assert lines["failed"].outcome == "retry"  # type: ignore[attr-defined]


def test_admin_actions_send_requeued_cancelled_rescheduled(
    r: redis.Redis, recorder: Recorder, parked_celery: Celery
) -> None:
    from delayqueue.engine import transitions
    from delayqueue.engine.execution import run
    from delayqueue.engine.keys import queue_keys
    from delayqueue.services import operations

    later = jobs.record.delay_for("later", seconds=60, on_commit=False)
    other = jobs.record.delay_for("other", seconds=60, on_commit=False)
    dying = delayqueue.enqueue(jobs.record, ["dying"], delay=0, max_attempts=1, on_commit=False)
    [claimed] = DelayWorker(["tests"], celery_app=parked_celery).run_pass().claimed
    keys = queue_keys("tests")
    run(transitions.fail(
        keys, dying.id, claimed.token, backoff_ms=0, error="E: x", traceback="",
        max_attempts=1, dead_max=100,
    ))  # fmt: skip

    assert r.zscore(keys.dead, dying.id) is not None
    operations.run_now("tests", [later.id])
    operations.cancel("tests", [other.id])
    operations.retry_dead("tests", [dying.id])
    assert [s["job_id"] for s in recorder.of("rescheduled")] == [later.id]
    assert [s["job_id"] for s in recorder.of("cancelled")] == [other.id]
    assert [s["job_id"] for s in recorder.of("requeued")] == [dying.id]
    assert recorder.senders("requeued") == {signals.SENDER_ADMIN}
