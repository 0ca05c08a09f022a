"""enqueue.lua with a batch: each job as a single enqueue writes it; one wake-up per batch."""

from __future__ import annotations

import time
from typing import Any

import redis

from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine.clients import get_redis
from delayqueue.engine.execution import get_scripts
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.packing import pack
from tests.support.stored import packed_specs, stored_job

Q = queue_keys("t")
BASE = {"task": "tests.support.jobs.record", "args": '["x"]'}


def enqueue_many(*jobs: tuple[str, int, str, str]) -> list[Any]:
    argv: list[Any] = [Q.wake, WAKE_HORIZON_MS]
    for job_id, delay_ms, key, conflict in jobs:
        spec = pack(BASE["task"], BASE["args"], key=key)
        argv += [job_id, "delay", delay_ms, key, conflict, spec, ""]
    return get_scripts().enqueue(
        [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix], argv
    )


def job(r: redis.Redis, job_id: str) -> dict[str, str]:
    return stored_job(r, Q, job_id)


def test_batch_writes_each_job_like_enqueue(r: redis.Redis) -> None:
    before = time.time() * 1000
    replies = enqueue_many(("A" * 26, 1000, "", "keep"), ("B" * 26, 0, "k1", "keep"))
    assert [reply[2:] for reply in replies] == [["created", "scheduled"]] * 2
    assert before + 1000 <= float(r.zscore(Q.scheduled, "A" * 26) or 0) <= time.time() * 1000 + 1000
    assert job(r, "B" * 26) == {**BASE, "key": "k1"}
    assert r.hget(Q.dedupe, "k1") == "B" * 26


def test_dedupe_inside_one_batch_and_against_existing(r: redis.Redis) -> None:
    replies = enqueue_many(("C" * 26, 5000, "k", "keep"), ("D" * 26, 100, "k", "keep"))
    assert replies[1][0] == "C" * 26 and replies[1][2] == "kept"
    replies = enqueue_many(("E" * 26, 100, "k", "replace"))
    assert replies[0][0] == "C" * 26 and replies[0][2] == "replaced"
    assert r.zcard(Q.scheduled) == 1 and not r.exists(Q.job("D" * 26), Q.job("E" * 26))
    assert list(packed_specs(r, Q)) == ["C" * 26]


def test_one_wake_when_the_batch_changes_the_head(r: redis.Redis) -> None:
    pubsub = get_redis().pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(Q.wake)
    enqueue_many(("F" * 26, 5000, "", "keep"), ("G" * 26, 100, "", "keep"))
    enqueue_many(("H" * 26, 9000, "", "keep"))  # not the earliest: no wake
    messages = []
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message:
            messages.append(message)
    pubsub.close()
    assert len(messages) == 1
    assert float(messages[0]["data"]) == r.zscore(Q.scheduled, "G" * 26)
