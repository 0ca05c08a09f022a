"""Arguments shaped like kombu's JSON type envelope (``{"__type__": ..., "__value__": ...}``):
refused at the call, and found in Redis (written by something else) they cost only their own
job, never the batch message they would share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.engine.packing import pack
from delayqueue.errors import NotSerializable
from tests.support import jobs
from tests.support.corrupt import keys_of_the_test
from tests.support.processes import Process
from tests.support.waiting import wait_for

Q = queue_keys("tests")
ENVELOPES = [
    {"__type__": "nope", "__value__": 1},
    {"__type__": "bytes", "__value__": "X"},
    {"__type__": "decimal", "__value__": "1.5"},
    [1, {"a": {"__type__": "datetime", "__value__": "2030-01-01T00:00:00"}}],
]


@pytest.mark.parametrize("value", ENVELOPES, ids=["nope", "bytes", "decimal", "nested"])
def test_an_envelope_shaped_argument_is_refused_at_the_call_and_nothing_is_written(
    r: redis.Redis, value: Any
) -> None:
    with pytest.raises(NotSerializable, match="__type__"):
        jobs.record.delay_for("x", value, seconds=1, on_commit=False)
    with pytest.raises(NotSerializable, match="__type__"):
        jobs.record.delay_for(tag=value, seconds=1, on_commit=False)
    assert keys_of_the_test(r) == []


def test_a_dict_with_more_keys_than_the_envelope_is_kept_as_it_is(r: redis.Redis) -> None:
    job = jobs.record.delay_for(
        {"__type__": "bytes", "__value__": "X", "other": 1}, seconds=5, on_commit=False
    )
    assert r.zscore(Q.scheduled, job.id) is not None


def _plant(args: list[Any]) -> str:
    """A job written with the enqueue script directly, as a client that skips the API's
    checks (another version, another language) would write it."""
    job_id = new_job_id()
    packed = pack(jobs.record.name, json.dumps(args))
    new = transitions.NewJob(job_id, "delay", 0, "", "keep", packed)
    run(transitions.enqueue(Q, [new], wake_horizon_ms=60_000))
    return job_id


def test_a_planted_envelope_costs_only_its_own_job_in_a_burst(
    r: redis.Redis, celery_worker: Process, delay_worker: Callable[..., Process]
) -> None:
    """Among 200 jobs due at once (batched: one message carries many), the job whose stored
    arguments kombu would misread goes to dead with the reason; every other job runs once."""
    bad = [
        _plant([{"__type__": "nope", "__value__": 1}]),
        _plant([{"__type__": "bytes", "__value__": "X"}]),
    ]
    tags = [f"ok-{i}" for i in range(200)]
    jobs.record.delay_many([(tag,) for tag in tags], seconds=0.5, on_commit=False)
    delay_worker()
    wait_for(lambda: r.llen(jobs.RAN) >= len(tags), 60, 0.1)
    wait_for(lambda: r.zcard(Q.inflight) == 0 and r.zcard(Q.scheduled) == 0, 30, 0.1)
    ran = [json.loads(item)["tag"] for item in r.lrange(jobs.RAN, 0, -1)]
    assert sorted(ran) == sorted(tags)  # each once, and nothing of the planted two ran
    for job_id in bad:
        assert r.zscore(Q.dead, job_id) is not None
        assert "__type__" in str(r.hget(Q.job(job_id), "why"))
    assert "Can't decode message body" not in celery_worker.output()
