"""enqueue.lua with a batch: each job as a single enqueue writes it; one wake-up per batch; the
plain layout of keyless batches (engine/plain_enqueue.py)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Literal

import pytest
import redis

from delayqueue import signals
from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine.clients import get_redis
from delayqueue.engine.execution import get_scripts
from delayqueue.engine.keys import (
    JOB_ID,
    STATS_TTL_SECONDS,
    current_minute,
    new_job_id,
    new_job_ids,
    queue_keys,
)
from delayqueue.engine.packing import pack
from delayqueue.engine.plain_enqueue import PlainWritten, enqueue_plain
from tests.support import jobs
from tests.support.states import redis_ms
from tests.support.stored import packed_specs, stored_job

Q = queue_keys("t")
BASE = {"task": "tests.support.jobs.record", "args": '["x"]'}


def enqueue_many(*jobs: tuple[str, int, str, str]) -> list[Any]:
    argv: list[Any] = [Q.wake, WAKE_HORIZON_MS]
    for job_id, delay_ms, key, conflict in jobs:
        spec = pack(BASE["task"], BASE["args"], key=key)
        argv += [job_id, "delay", delay_ms, key, conflict, spec, ""]
    return get_scripts().enqueue(
        [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix, Q.tasks], argv
    )


def job(r: redis.Redis, job_id: str) -> dict[str, str]:
    return stored_job(r, Q, job_id)


def test_batch_writes_each_job_like_enqueue(r: redis.Redis) -> None:
    before = redis_ms(r)  # Redis's clock, as the script's (whole ms: time.time()'s fraction
    # made the lower bound fail when no ms passed between the two readings)
    replies = enqueue_many(("A" * 26, 1000, "", "keep"), ("B" * 26, 0, "k1", "keep"))
    assert [reply[2:] for reply in replies] == [["created", "scheduled"]] * 2
    assert before + 1000 <= float(r.zscore(Q.scheduled, "A" * 26) or 0) <= redis_ms(r) + 1000
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


# ---- the plain layout (engine/plain_enqueue.py): delay_many's keyless jobs ----------------


def plain_call(*jobs: tuple[str, int], mode: Literal["delay", "at"] = "delay") -> Any:
    spec = pack(BASE["task"], BASE["args"])
    return enqueue_plain(
        Q, mode, [(job_id, ms, spec) for job_id, ms in jobs], wake_horizon_ms=WAKE_HORIZON_MS
    )


def plain(*jobs: tuple[str, int], mode: Literal["delay", "at"] = "delay") -> PlainWritten:
    """The plain call's reply as the client reads it."""
    call = plain_call(*jobs, mode=mode)
    return call.parse(get_scripts().enqueue(call.keys, call.args))


def claim_due() -> list[Any]:
    return get_scripts().claim(
        [Q.scheduled, Q.inflight, Q.job_prefix, Q.paused, Q.stats(current_minute()), Q.dead,
         Q.spec_prefix, Q.limit_prefix, Q.dedupe, Q.tasks],
        [10, 60_000, STATS_TTL_SECONDS, 0],
    )  # fmt: skip


A, B, C = "A" * 26, "B" * 26, "C" * 26  # (each in a bucket of its own)


def test_plain_batch_writes_each_job_as_the_general_layout_does(r: redis.Redis) -> None:
    written = plain((A, 1000), (B, 0))
    assert written.now_ms is not None and written.replies is None
    assert r.zscore(Q.scheduled, A) == written.now_ms + 1000 == written.due_ms("delay", 1000)
    assert r.zscore(Q.scheduled, B) == written.now_ms
    enqueue_many((C, 1000, "", "keep"))
    assert job(r, A) == job(r, B) == job(r, C) == BASE
    assert r.hget(Q.spec_bucket(A), A) == r.hget(Q.spec_bucket(C), C)
    assert not r.exists(Q.job(A), Q.job(B))

    at = 4_102_444_800_000  # 2100-01-01
    written = plain(("D" * 26, at), ("E" * 26, at + 5), mode="at")
    assert written.due_ms("at", at) == at
    assert r.zscore(Q.scheduled, "D" * 26) == at and r.zscore(Q.scheduled, "E" * 26) == at + 5


def test_plain_batch_sent_again_after_a_claim_replies_per_job(r: redis.Redis) -> None:
    plain((A, 0), (B, 60_000))
    assert [row[0] for row in claim_due()[4]] == [A]
    again = plain((A, 0), (B, 60_000))  # (a dropped connection: the client sends it again)
    assert again.now_ms is None and again.replies is not None
    assert [(one.id, one.outcome, one.state) for one in again.replies] == [
        (A, "created", "inflight"),
        (B, "created", "scheduled"),
    ]
    assert r.zrange(Q.scheduled, 0, -1) == [B] and list(packed_specs(r, Q)) == [B]
    assert r.zscore(Q.inflight, A) is not None


def test_plain_batch_sent_twice_before_a_claim_writes_each_job_once(r: redis.Redis) -> None:
    plain((A, 60_000), (B, 60_000))
    assert plain((A, 60_000), (B, 60_000)).now_ms is not None
    assert r.zcard(Q.scheduled) == 2 and sorted(packed_specs(r, Q)) == [A, B]


def test_plain_batch_meeting_a_bucket_of_another_type_writes_nothing(r: redis.Redis) -> None:
    r.set(Q.spec_bucket(B), "someone else's")
    call = plain_call((A, 0), (B, 0), (C, 0))
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        get_scripts().enqueue(call.keys, call.args)
    # A's spec, written before B's bucket refused its own, was taken back
    assert r.zcard(Q.scheduled) == 0 and packed_specs_but(r, Q.spec_bucket(B)) == {}
    assert r.get(Q.spec_bucket(B)) == "someone else's"


def packed_specs_but(r: redis.Redis, bucket: str | bytes) -> dict[Any, Any]:
    pattern = Q.spec_prefix.replace("[", "\\[").replace("]", "\\]") + "*"
    return {b: r.hgetall(b) for b in r.scan_iter(match=pattern) if b != bucket}


@pytest.mark.parametrize(
    "argv_of",
    [
        lambda args: [*args[:5], "-1", *args[6:]],  # a negative delay
        lambda args: [*args[:8], "nan", *args[9:]],  # the second job's ms
        lambda args: [*args[:9], "task\nargs", *args[10:]],  # a spec of too few parts
        lambda args: [*args[:7], "", *args[8:]],  # an empty id
        lambda args: [*args[:3], "soon", *args[4:]],  # a mode
        lambda args: args[:-1],  # not 3 per job
    ],
    ids=["delay", "ms", "spec", "id", "mode", "count"],
)
def test_plain_batch_refuses_bad_input_before_writing(r: redis.Redis, argv_of: Any) -> None:
    call = plain_call((A, 0), (B, 0))
    with pytest.raises(redis.ResponseError, match="^enqueue: "):
        get_scripts().enqueue(call.keys, argv_of(call.args))
    assert r.dbsize() == 0


def test_plain_batch_wakes_once_when_it_makes_the_head(r: redis.Redis) -> None:
    pubsub = get_redis().pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(Q.wake)
    plain((A, 5000), (B, 100))
    plain((C, 9000), ("D" * 26, 8000))  # not the earliest: no wake
    messages = []
    deadline = time.monotonic() + 1
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.1)
        if message:
            messages.append(message)
    pubsub.close()
    assert len(messages) == 1
    assert float(messages[0]["data"]) == r.zscore(Q.scheduled, B)


def test_new_job_ids_are_ulids_of_now_spread_over_the_buckets() -> None:
    before = new_job_id()
    ids = new_job_ids(4_096)
    after = new_job_id()
    assert len(set(ids)) == 4_096 and all(JOB_ID.fullmatch(i) for i in ids)
    heads = {i[:10] for i in ids}  # (the time part: one ms for the batch, sorting as time)
    assert len(heads) == 1 and before[:10] <= heads.pop() <= after[:10]
    assert len({i[-2:] for i in ids}) > 900  # of the 1,024 buckets (expected: ~1,000)
    assert new_job_ids(0) == []


def test_delay_many_handles_say_what_redis_holds(r: redis.Redis) -> None:
    made = jobs.record.delay_many([(f"j{i}",) for i in range(600)], seconds=30, on_commit=False)
    scheduled = queue_keys("tests").scheduled
    for i, made_job in enumerate(made):  # (two chunks: 500, then 100)
        score = r.zscore(scheduled, made_job.id)
        assert score is not None and (made_job.state, made_job.outcome) == ("scheduled", "created")
        assert made_job.due_at == datetime.fromtimestamp(score / 1000, tz=UTC)
        if i in (0, 599):
            assert stored_job(r, queue_keys("tests"), made_job.id)["args"] == f'["j{i}"]'
    assert r.zcard(scheduled) == 600


def test_delay_many_reports_each_job_scheduled(r: redis.Redis) -> None:
    seen: list[dict[str, Any]] = []

    def receiver(**fields: Any) -> None:
        seen.append(fields)

    signals.job_scheduled.connect(receiver, weak=False)
    try:
        made = jobs.record.delay_many([("a",), ("b",), ("c",)], seconds=30, on_commit=False)
    finally:
        signals.job_scheduled.disconnect(receiver)
    scheduled = queue_keys("tests").scheduled
    assert [(s["job_id"], s["outcome"], s["task"]) for s in seen] == [
        (j.id, "created", jobs.record.name) for j in made
    ]
    assert [s["due_ms"] for s in seen] == [r.zscore(scheduled, j.id) for j in made]
