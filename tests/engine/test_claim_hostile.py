"""What a delay worker's pass does with planted data around the claim: a claimed job is always
dispatched or buried with its reason, whatever another key of its queue holds; what the
Celery side would refuse to run is buried at its first claim, not sent over and over."""

from __future__ import annotations

import json
import logging

import pytest
import redis
from celery import Celery

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.engine.packing import pack
from delayqueue.worker import served_queues
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.corrupt import decode_message, take_messages

Q = queue_keys("tests")


def _plant(job_id: str) -> None:
    spec = pack(jobs.record.name, json.dumps(["planted"]))
    new = transitions.NewJob(job_id, "delay", 0, "", "keep", spec)
    run(transitions.enqueue(Q, [new], wake_horizon_ms=60_000))


def test_a_dedupe_hash_of_the_wrong_type_costs_the_reap_not_the_claim(
    r: redis.Redis,
    parked_celery: Celery,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(served_queues, "_said", set())  # what earlier tests made it say
    made = jobs.record.delay_many([(f"t{i}",) for i in range(5)], seconds=0, on_commit=False)
    r.delete(Q.dedupe)
    r.set(Q.dedupe, "not a hash")
    worker = DelayWorker(["tests"], celery_app=parked_celery)
    with caplog.at_level(logging.ERROR, "delayqueue.worker.loop"):
        worker.run_pass()
        worker._reap_state.clear()  # reap again on the next pass
        worker.run_pass()
    sent = {decode_message(m).dispatch[1] for m in take_messages()}
    assert sent == {job.id for job in made}  # every claimed job was dispatched
    assert r.zcard(Q.scheduled) == 0
    reap_errors = [m for m in caplog.messages if "queue tests:" in m]
    assert len(reap_errors) == 1, caplog.messages  # said once, not every pass
    assert "WRONGTYPE" in reap_errors[0] or "wrong" in reap_errors[0].lower()


@pytest.mark.parametrize(
    "job_id", ["frac", "01M88BNH47DNFCDXWEFN99KB3", "01m88bnh47dnfcdxwefn99kb3e"]
)
def test_a_scheduled_member_that_is_not_a_job_id_is_buried_at_its_first_claim(
    r: redis.Redis, parked_celery: Celery, job_id: str
) -> None:
    _plant(job_id)
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    assert take_messages() == []  # nothing sent for the Celery side to refuse
    assert r.zscore(Q.dead, job_id) is not None
    assert "not a delayqueue job id" in str(r.hget(Q.job(job_id), "why"))


def test_a_job_that_cannot_be_buried_costs_the_pass_nothing(
    r: redis.Redis, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    """A member that is no job id goes to dead, but bury.lua refuses a dedupe hash of the
    wrong type: the pass says so and dispatches the other jobs (it raised, and a delay
    worker stopped its pass for one job's data)."""
    _plant("not-an-id")
    good = jobs.record.delay_for("good", seconds=0, on_commit=False)
    r.set(Q.dedupe, "not a hash")
    worker = DelayWorker(["tests"], celery_app=parked_celery)
    with caplog.at_level(logging.ERROR, "delayqueue.worker.dispatch"):
        worker.run_pass()
    worker.close()
    assert {decode_message(m).dispatch[1] for m in take_messages()} == {good.id}
    assert any("could not be buried" in m and "not-an-id" in m for m in caplog.messages)
    assert r.zscore(Q.dead, "not-an-id") is None  # where it was: a pass later, reaped


def test_a_job_whose_token_outgrew_15_digits_is_buried_at_its_claim(
    r: redis.Redis, parked_celery: Celery
) -> None:
    job_id = new_job_id()
    _plant(job_id)
    r.hset(Q.job(job_id), mapping={"task": jobs.record.name, "args": '["x"]', "tok": "9" * 15})
    r.hdel(Q.spec_bucket(job_id), job_id)
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    assert take_messages() == []
    assert r.zscore(Q.dead, job_id) is not None
    assert "fencing token" in str(r.hget(Q.job(job_id), "why"))
