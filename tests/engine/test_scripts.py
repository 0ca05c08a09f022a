"""Each Lua transition, run directly against the suite's Redis."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import redis

from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine import scripts, transitions
from delayqueue.engine.execution import get_scripts
from delayqueue.engine.keys import STATS_TTL_SECONDS, current_minute, new_job_id, queue_keys
from delayqueue.engine.packing import pack
from tests.support.stored import packed_specs, stored_job

Q = queue_keys("t")
WAKE = Q.wake
TASK = "tests.support.jobs.record"
# The stats hash every call here counts in: a script counts in the key it is given, so the
# tests give one key and read that one back (a key of the minute at each call would split a
# test's counts between two hashes when a minute ends between its calls).
STATS = Q.stats(current_minute())


def enqueue(
    job_id: str, delay_ms: int = 0, key: str = "", conflict: str = "keep", *fields: str
) -> list[Any]:
    """One job of tests.support.jobs.record('x'); ``fields`` are pairs of kwargs, vt, max (3)."""
    extra = dict(zip(fields[::2], fields[1::2], strict=True))
    spec = pack(
        "tests.support.jobs.record",
        '["x"]',
        extra.get("kwargs", ""),
        extra.get("max", "3"),
        extra.get("vt", ""),
        key,
    )
    return get_scripts().enqueue(
        [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix],
        [WAKE, WAKE_HORIZON_MS, job_id, "delay", delay_ms, key, conflict, spec, ""],
    )[0]


def job(r: redis.Redis, job_id: str) -> dict[str, str]:
    """Everything Redis holds about a job: its hash and its packed spec, if any."""
    return stored_job(r, Q, job_id)


def exists(r: redis.Redis, job_id: str) -> bool:
    return bool(r.exists(Q.job(job_id)) or r.hexists(Q.spec_bucket(job_id), job_id))


def claim(limit: int = 10, visibility_ms: int = 60_000, ahead_ms: int = 0) -> list[Any]:
    return get_scripts().claim(
        [Q.scheduled, Q.inflight, Q.job_prefix, Q.paused, STATS, Q.dead,
         Q.spec_prefix],
        [limit, visibility_ms, STATS_TTL_SECONDS, ahead_ms],
    )  # fmt: skip


CANCEL_KEYS = [Q.scheduled, Q.dedupe, Q.job_prefix, Q.spec_prefix]


def ack(job_id: str, token: str) -> int:
    return get_scripts().ack(
        [Q.job(job_id), Q.inflight, Q.scheduled, Q.dedupe, STATS, Q.dead],
        [job_id, token, STATS_TTL_SECONDS],
    )


def fail(job_id: str, token: str, backoff_ms: int = 0, max_attempts: int = 3) -> str:
    return get_scripts().fail(
        [Q.job(job_id), Q.inflight, Q.scheduled, Q.dead, Q.dedupe, STATS,
         Q.job_prefix],
        [job_id, token, backoff_ms, "ValueError: boom", "Traceback...", max_attempts, 100,
         STATS_TTL_SECONDS, WAKE],
    )  # fmt: skip


def score(r: redis.Redis, zset: str, job_id: str) -> float:
    value = r.zscore(zset, job_id)
    assert value is not None, f"{job_id} is not in {zset}"
    return value


def reap(limit: int = 100) -> list[int]:
    return get_scripts().reap([Q.inflight, Q.scheduled, Q.dead, Q.job_prefix, Q.dedupe], [limit, 3])


def test_enqueue_writes_hash_and_due_time_from_redis_clock(r: redis.Redis) -> None:
    before = int(r.time()[0]) * 1000
    job_id, due, outcome, state = enqueue("A", 5000)
    assert (job_id, outcome, state) == ("A", "created", "scheduled")
    assert before + 5000 <= int(due) <= before + 7000
    assert r.zscore(Q.scheduled, "A") == int(due)
    assert job(r, "A") == {"task": "tests.support.jobs.record", "args": '["x"]', "max": "3"}
    assert not r.exists(Q.job("A"))  # a scheduled job is one field of its specs bucket
    assert r.hkeys(Q.spec_bucket("A")) == ["A"]


def test_enqueue_publishes_wake_only_for_a_new_earliest_job(r: redis.Redis) -> None:
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(WAKE)
    pubsub.get_message(timeout=1)  # the subscribe confirmation
    enqueue("A", 10_000)
    assert pubsub.get_message(timeout=1) is not None
    enqueue("B", 20_000)  # later than the head: no wake
    assert pubsub.get_message(timeout=0.2) is None
    enqueue("C", 1_000)  # new head
    assert pubsub.get_message(timeout=1) is not None
    r.delete(Q.scheduled)
    enqueue("D", WAKE_HORIZON_MS + 1_000)  # new head, but due after any worker looks again
    assert pubsub.get_message(timeout=0.2) is None
    pubsub.close()


def test_dedupe_keep_returns_the_existing_job(r: redis.Redis) -> None:
    enqueue("A", 5000, "k")
    job_id, due, outcome, _ = enqueue("B", 60_000, "k")
    assert (job_id, outcome) == ("A", "kept")
    assert r.zcard(Q.scheduled) == 1 and not exists(r, "B")
    assert r.hget(Q.dedupe, "k") == "A"
    assert int(due) == r.zscore(Q.scheduled, "A")


def test_dedupe_replace_moves_the_job_and_takes_new_args(r: redis.Redis) -> None:
    enqueue("A", 5000, "k")
    job_id, due, outcome, _ = enqueue("B", 60_000, "k", "replace", "kwargs", '{"n":1}')
    assert (job_id, outcome) == ("A", "replaced")
    assert r.zscore(Q.scheduled, "A") == int(due)
    assert job(r, "A")["kwargs"] == '{"n":1}'
    assert r.zcard(Q.scheduled) == 1 and not exists(r, "B")


def test_dedupe_key_of_an_inflight_job(r: redis.Redis) -> None:
    enqueue("A", 0, "k")
    claim()
    kept = enqueue("B", 0, "k")
    assert (kept[0], kept[2], kept[3]) == ("A", "kept", "inflight")
    assert not exists(r, "B")
    # replace while the first run is in flight: a new job owns the key
    job_id, _, outcome, state = enqueue("C", 0, "k", "replace")
    assert (job_id, outcome, state) == ("C", "created", "scheduled")
    assert r.hget(Q.dedupe, "k") == "C"


def test_cancel_by_id_and_by_key(r: redis.Redis) -> None:
    enqueue("A", 5000)
    enqueue("B", 5000, "k")
    cancel = get_scripts().cancel
    assert cancel(CANCEL_KEYS, ["A", ""]) == [1, "A"]
    assert cancel(CANCEL_KEYS, ["", "k"]) == [1, "B"]
    assert r.zcard(Q.scheduled) == 0 and r.hlen(Q.dedupe) == 0
    assert not exists(r, "A") and not exists(r, "B")
    assert cancel(CANCEL_KEYS, ["A", ""]) == [0, "A"]
    assert cancel(CANCEL_KEYS, ["", "k"]) == [0, ""]


def test_cancel_leaves_an_inflight_job_alone(r: redis.Redis) -> None:
    enqueue("A", 0)
    claim()
    assert get_scripts().cancel(CANCEL_KEYS, ["A", ""])[0] == 0
    assert r.zscore(Q.inflight, "A") is not None and r.exists(Q.job("A"))


def test_reschedule_moves_only_scheduled_jobs(r: redis.Redis) -> None:
    enqueue("A", 60_000, "k")
    now = int(r.time()[0]) * 1000
    job_id, due = get_scripts().reschedule([Q.scheduled, Q.dedupe], ["", "k", "delay", 1000, WAKE])
    assert job_id == "A" and now + 1000 <= due <= now + 3000
    assert r.zscore(Q.scheduled, "A") == due
    claim_at = time.monotonic()
    while not claim()[4]:
        assert time.monotonic() - claim_at < 5
        time.sleep(0.05)
    assert get_scripts().reschedule([Q.scheduled, Q.dedupe], ["A", "", "delay", 0, WAKE]) == [
        "A",
        -1,
    ]


def test_claim_takes_due_jobs_in_due_order_up_to_the_limit(r: redis.Redis) -> None:
    for i, delay in enumerate([0, 0, 0, 60_000]):
        enqueue(f"J{i}", delay)
    r.zadd(Q.scheduled, {"J2": 1, "J0": 2, "J1": 3})  # due long ago, in this order
    now, next_due, next_deadline, paused, jobs = claim(limit=2, visibility_ms=30_000)
    assert [j[0] for j in jobs] == ["J2", "J0"]
    assert paused == 0 and next_due == 3
    assert jobs[0][1:4] == [1, 1, "tests.support.jobs.record"]  # token, attempt, task
    assert r.zscore(Q.inflight, "J2") == now + 30_000 == next_deadline
    assert r.zcard(Q.scheduled) == 2  # J1 and the future J3
    assert [j[0] for j in claim(limit=10)[4]] == ["J1"]
    assert r.hget(STATS, "dispatched") == "3"


def test_claim_ahead_takes_jobs_due_within_the_window_with_their_own_due_times(
    r: redis.Redis,
) -> None:
    enqueue("SOON", 500)
    enqueue("LATER", 5_000)
    assert claim(ahead_ms=100)[4] == []  # due in 0.5 s: outside a 0.1 s window
    now, next_due, _, _, jobs = claim(ahead_ms=1_000)
    assert [j[0] for j in jobs] == ["SOON"]
    assert now < int(jobs[0][6]) <= now + 500  # its own due time, still ahead
    assert r.zscore(Q.inflight, "SOON") == now + 60_000  # the deadline runs from the claim
    assert next_due > now + 4_000  # LATER, reported at its due time
    assert r.zscore(Q.scheduled, "LATER") is not None


def test_claim_honours_per_job_visibility_and_pause(r: redis.Redis) -> None:
    enqueue("A", 0, "", "keep", "vt", "1234")
    r.set(Q.paused, "1")
    assert claim()[3] == 1 and r.zcard(Q.scheduled) == 1
    r.delete(Q.paused)
    now, *_ = claim()
    assert r.zscore(Q.inflight, "A") == now + 1234


def test_claim_moves_a_job_without_data_to_dead(r: redis.Redis) -> None:
    r.zadd(Q.scheduled, {"GHOST": 0})
    assert claim()[4] == []
    assert r.zscore(Q.dead, "GHOST") is not None
    assert "missing" in str(r.hget(Q.job("GHOST"), "why"))


def test_claim_unpacks_the_spec_into_the_job_hash(r: redis.Redis) -> None:
    enqueue("A", 0, "line one\nline two", "keep", "kwargs", '{"n":1}', "vt", "5000")
    assert len(packed_specs(r, Q)) == 1 and not r.exists(Q.job("A"))
    now, *_, jobs = claim()
    [[*claimed, due]] = jobs
    assert claimed == ["A", 1, 1, "tests.support.jobs.record", '["x"]', '{"n":1}']
    assert 0 <= now - int(due) < 5_000  # the score it was claimed at: its due time
    assert packed_specs(r, Q) == {}
    stored = r.hgetall(Q.job("A"))
    assert {k: stored[k] for k in ("task", "args", "kwargs", "max", "vt", "key")} == {
        "task": "tests.support.jobs.record",
        "args": '["x"]',
        "kwargs": '{"n":1}',
        "max": "3",
        "vt": "5000",
        "key": "line one\nline two",  # a key may hold "\n": it is the spec's last field
    }
    assert score(r, Q.inflight, "A") == now + 5000


@pytest.mark.parametrize("spec", ["no newline at all", "a\nb\nc", "\n\n\n\n\n"])
def test_claim_moves_a_malformed_spec_to_dead_and_goes_on(r: redis.Redis, spec: str) -> None:
    enqueue("GOOD", 0)
    r.zadd(Q.scheduled, {"BAD": 0})
    r.hset(Q.spec_bucket("BAD"), "BAD", spec)
    assert [j[0] for j in claim()[4]] == ["GOOD"]
    assert r.zscore(Q.dead, "BAD") is not None and packed_specs(r, Q) == {}
    assert r.hget(Q.job("BAD"), "raw") == spec  # kept for people to look at
    assert "corrupt job data" in str(r.hget(Q.job("BAD"), "why"))


# ---- specs buckets -------------------------------------------------------------------------


def test_a_spec_goes_to_the_bucket_named_by_the_ids_last_two_characters(r: redis.Redis) -> None:
    ids = [new_job_id() for _ in range(3)]
    for job_id in ids:
        enqueue(job_id, 60_000)
        assert Q.spec_bucket(job_id) == f"{Q.base}:specs:{job_id[-2:]}"
        assert r.hget(Q.spec_bucket(job_id), job_id) == pack(TASK, '["x"]', "", "3", "", "")
    assert set(packed_specs(r, Q)) == set(ids)
    assert get_scripts().cancel(CANCEL_KEYS, [ids[0], ""]) == [1, ids[0]]
    assert [j[0] for j in claim(ahead_ms=1000)[4]] == []  # not due
    r.zadd(Q.scheduled, {ids[1]: 0})
    assert [j[0] for j in claim()[4]] == [ids[1]]
    assert set(packed_specs(r, Q)) == {ids[2]}


@pytest.mark.parametrize("member", ["", "Z", "AB", "é", "éx", "x\n"])
@pytest.mark.parametrize("planted", [True, False])
def test_any_member_names_a_bucket_and_crashes_no_script(
    r: redis.Redis, member: str, planted: bool
) -> None:
    """A scheduled member of any length (an empty one, one character, bytes cut inside a
    UTF-8 character) names a bucket, the same in Lua and in QueueKeys.spec_bucket."""
    r.zadd(Q.scheduled, {member: 0, "OTHER": 0})
    if planted:
        r.hset(Q.spec_bucket(member), member, pack(TASK, '["m"]', "", "3", "", "k"))
        r.hset(Q.dedupe, "k", member)
    r.hset(Q.spec_bucket("OTHER"), "OTHER", pack(TASK, '["o"]', "", "3", "", ""))
    claimed = {j[0]: j[4] for j in claim()[4]}
    if planted:
        assert claimed == {member: '["m"]', "OTHER": '["o"]'}
        assert r.hget(Q.job(member), "args") == '["m"]' and packed_specs(r, Q) == {}
    else:
        assert claimed == {"OTHER": '["o"]'} and r.zscore(Q.dead, member) is not None
        assert "missing" in str(r.hget(Q.job(member), "why"))


@pytest.mark.parametrize("member", ["", "Z", "éx"])
def test_cancel_and_bury_of_a_member_of_any_length(r: redis.Redis, member: str) -> None:
    for key in ("k1", "k2"):
        r.delete(Q.job(member))
        r.zadd(Q.scheduled, {member: 0})
        r.hset(Q.spec_bucket(member), member, pack(TASK, '["m"]', "", "3", "", key))
        r.hset(Q.dedupe, key, member)
        if key == "k1":
            assert get_scripts().cancel(CANCEL_KEYS, ["", key]) == [1, member]
            assert not r.exists(Q.job(member))
        else:
            keys = transitions.bury(Q, member, "unknown task").keys
            assert get_scripts().bury(keys, [member, "unknown task", STATS_TTL_SECONDS]) == 1
            assert r.hget(Q.job(member), "args") == '["m"]'
        assert packed_specs(r, Q) == {} and r.hlen(Q.dedupe) == 0


def test_replace_of_a_job_back_from_a_failure_keeps_its_history(r: redis.Redis) -> None:
    enqueue("A", 0, "k")
    token = str(claim()[4][0][1])
    begin("A", token)
    assert fail("A", token, backoff_ms=60_000) == "retry"
    enqueue("B", 0, "k", "replace", "kwargs", '{"n":2}')
    # A job that has a hash keeps its spec there: no packed spec beside it.
    assert packed_specs(r, Q) == {} and r.hget(Q.job("A"), "kwargs") == '{"n":2}'
    assert job(r, "A")["att"] == "1" and job(r, "A")["key"] == "k"
    _, _, attempt, _, _, kwargs, _ = claim()[4][0]
    assert (attempt, kwargs) == (2, '{"n":2}')
    assert json.loads(job(r, "A")["hist"])[0]["outcome"] == "failed"


def test_cancel_removes_the_spec_and_its_key(r: redis.Redis) -> None:
    enqueue("A", 5000, "k")
    assert get_scripts().cancel(CANCEL_KEYS, ["A", ""]) == [1, "A"]
    assert packed_specs(r, Q) == {} and r.hlen(Q.dedupe) == 0 and not exists(r, "A")


def test_ack_removes_the_job_and_its_key(r: redis.Redis) -> None:
    enqueue("A", 0, "k")
    token = str(claim()[4][0][1])
    assert ack("A", "999") == 0  # stale token: nothing happens
    assert r.exists(Q.job("A"))
    assert ack("A", token) == 1
    assert not r.exists(Q.job("A")) and r.zcard(Q.inflight) == 0 and r.hlen(Q.dedupe) == 0
    assert r.hget(STATS, "acked") == "1"


def test_ack_keeps_a_key_that_moved_to_a_newer_job(r: redis.Redis) -> None:
    enqueue("A", 0, "k")
    token = str(claim()[4][0][1])
    enqueue("B", 0, "k", "replace")
    assert ack("A", token) == 1
    assert r.hget(Q.dedupe, "k") == "B"


def test_begin_checks_the_fencing_token(r: redis.Redis) -> None:
    enqueue("A", 0)
    token = str(claim(visibility_ms=1_000)[4][0][1])
    begin = get_scripts().begin
    assert begin([Q.job("A"), Q.inflight], ["A", "0", 60_000]) == [0]
    started = begin([Q.job("A"), Q.inflight], ["A", token, 60_000])
    assert started[0] == 1 and started[1] == 1
    # the deadline restarts from the start of the run, which it returns (Redis's clock, µs)
    assert score(r, Q.inflight, "A") == started[3] // 1000 + 60_000
    seconds, micros = r.time()
    assert 0 <= int(seconds) * 1_000_000 + int(micros) - started[3] < 1_000_000


def test_a_dispatch_that_never_started_is_not_an_attempt(r: redis.Redis) -> None:
    enqueue("A", 0, "", "keep", "max", "1")
    for expected_deadline in (1000, 2000, 4000):
        now, *_, jobs = claim(visibility_ms=1000)
        assert jobs[0][2] == 1  # attempt 1 each time: the lost dispatches did not count
        assert score(r, Q.inflight, "A") == now + expected_deadline  # doubled each time
        r.zadd(Q.inflight, {"A": 0})  # its deadline passes before any task started
        assert reap() == [1, 0]
        assert r.hget(Q.job("A"), "att") == "0"
    assert json.loads(str(r.hget(Q.job("A"), "hist")))[-1]["outcome"] == "not started"
    token = str(claim(visibility_ms=1000)[4][0][1])
    assert begin("A", token)[0] == 1
    assert r.hget(Q.job("A"), "rp") is None  # a started run resets the doubling
    r.zadd(Q.inflight, {"A": 0})
    assert reap() == [0, 1]  # a started run that timed out used the only attempt


def test_stale_token_after_a_redispatch_cannot_ack_or_fail(r: redis.Redis) -> None:
    enqueue("A", 0)
    old = str(claim(visibility_ms=0)[4][0][1])
    assert reap() == [1, 0]
    new = str(claim()[4][0][1])
    assert new != old
    assert get_scripts().begin([Q.job("A"), Q.inflight], ["A", old, 60_000]) == [0]
    assert fail("A", old) == "stale" and ack("A", old) == 0
    assert r.zscore(Q.inflight, "A") is not None
    assert ack("A", new) == 1


def test_fail_retries_with_backoff_then_moves_to_dead(r: redis.Redis) -> None:
    enqueue("A", 0, "k")
    for _ in (1, 2):
        token = str(claim()[4][0][1])
        now = int(r.time()[0]) * 1000
        assert fail("A", token, backoff_ms=0) == "retry"
        assert now - 1000 <= score(r, Q.scheduled, "A") <= now + 2000
    token = str(claim()[4][0][1])
    assert fail("A", token) == "dead"
    assert r.zscore(Q.dead, "A") is not None and r.zcard(Q.scheduled) == 0
    job = r.hgetall(Q.job("A"))
    assert job["err"] == "ValueError: boom" and job["tb"] == "Traceback..."
    assert job["why"] == "failed 3 of 3 attempts"
    assert [h["outcome"] for h in json.loads(job["hist"])] == ["failed"] * 3
    assert r.hlen(Q.dedupe) == 0  # the key is free for a new job


def test_fail_backoff_sets_the_next_due_time(r: redis.Redis) -> None:
    enqueue("A", 0)
    token = str(claim()[4][0][1])
    now = int(r.time()[0]) * 1000
    assert fail("A", token, backoff_ms=30_000) == "retry"
    assert now + 29_000 <= score(r, Q.scheduled, "A") <= now + 32_000


def begin(job_id: str, token: str) -> list[Any]:
    return get_scripts().begin([Q.job(job_id), Q.inflight], [job_id, token, 0])


def test_reap_returns_expired_jobs_and_buries_exhausted_ones(r: redis.Redis) -> None:
    enqueue("A", 0)
    enqueue("B", 0, "", "keep", "max", "1")
    for job_id, token, *_ in claim(visibility_ms=0)[4]:
        assert begin(job_id, str(token))[0] == 1  # both tasks started, neither finished
    assert reap() == [1, 1]
    assert r.zscore(Q.scheduled, "A") is not None
    assert r.zscore(Q.dead, "B") is not None
    assert "visibility timeout" in str(r.hget(Q.job("B"), "why"))
    assert json.loads(str(r.hget(Q.job("A"), "hist")))[0]["outcome"] == "timed out"


def test_reap_leaves_jobs_whose_deadline_is_ahead(r: redis.Redis) -> None:
    enqueue("A", 0)
    claim(visibility_ms=60_000)
    assert reap() == [0, 0]
    assert r.zscore(Q.inflight, "A") is not None


def test_release_gives_the_attempt_back(r: redis.Redis) -> None:
    enqueue("A", 0)
    token = str(claim()[4][0][1])
    release = get_scripts().release
    keys = [Q.job("A"), Q.inflight, Q.scheduled]
    assert release(keys, ["A", "999", 1000, 1, "broker down", WAKE]) == 0
    assert release(keys, ["A", token, 1000, 1, "broker down", WAKE]) == 1
    assert r.hget(Q.job("A"), "att") == "0" and r.zscore(Q.scheduled, "A") is not None
    assert release(keys, ["A", "", 0, 0, "again", WAKE]) == 0  # no longer in flight


def test_bury_requeue_and_purge(r: redis.Redis) -> None:
    enqueue("A", 0, "k")
    enqueue("B", 0)
    s = get_scripts()
    for job_id in ("A", "B"):
        keys = [Q.job(job_id), Q.inflight, Q.scheduled, Q.dead, Q.dedupe, STATS, Q.spec_prefix]
        assert s.bury(keys, [job_id, "unknown task", STATS_TTL_SECONDS]) == 1
    assert r.zcard(Q.dead) == 2 and r.zcard(Q.scheduled) == 0 and r.hlen(Q.dedupe) == 0
    assert s.requeue([Q.job("A"), Q.dead, Q.scheduled, Q.dedupe], ["A", 0, WAKE]) == 1
    assert r.hget(Q.dedupe, "k") == "A" and r.hget(Q.job("A"), "att") == "0"
    assert s.requeue([Q.job("A"), Q.dead, Q.scheduled, Q.dedupe], ["A", 0, WAKE]) == 0
    assert s.purge([Q.dead, Q.job_prefix], ["ids", "B", "NOPE"]) == 1
    assert not exists(r, "B") and r.zcard(Q.dead) == 0


def test_purge_oldest(r: redis.Redis) -> None:
    for i in range(5):
        r.hset(Q.job(f"D{i}"), "task", "t")
        r.zadd(Q.dead, {f"D{i}": i})
    assert get_scripts().purge([Q.dead, Q.job_prefix], ["oldest", 3]) == 3
    assert r.zrange(Q.dead, 0, -1) == ["D3", "D4"]
    assert not r.exists(Q.job("D0")) and r.exists(Q.job("D4"))


@pytest.mark.parametrize("name", ["enqueue", "claim", "fail", "reap", "ack"])
def test_every_script_declares_its_keys_in_a_header(name: str) -> None:
    source = scripts.load_source(name)
    assert source.startswith("-- ") and "KEYS[1]" in source.split("local", 1)[0]


def test_a_job_reaped_to_dead_while_running_is_settled_by_its_outcome(r: redis.Redis) -> None:
    enqueue("A", 0, "", "keep", "max", "1")
    enqueue("B", 0, "", "keep", "max", "1")
    tokens = {job[0]: str(job[1]) for job in claim(visibility_ms=0)[4]}
    for job_id, token in tokens.items():
        begin(job_id, token)
    assert reap() == [0, 2]  # both started and timed out on their last attempt
    assert ack("A", tokens["A"]) == 1  # ...but A finished after all
    assert r.zscore(Q.dead, "A") is None and not r.exists(Q.job("A"))
    assert fail("B", tokens["B"], max_attempts=1) == "dead"
    assert r.zcard(Q.dead) == 1 and r.zscore(Q.dead, "B") is not None


def test_fail_release_requeue_and_reschedule_wake_only_for_a_new_head(r: redis.Redis) -> None:
    s = get_scripts()
    enqueue("H", 10_000)
    enqueue("A", 0)
    enqueue("B", 0)
    tokens = {job[0]: str(job[1]) for job in claim()[4]}
    r.hset(Q.job("D"), mapping={"task": "t", "args": "[]"})
    r.zadd(Q.dead, {"D": 1})
    pubsub = r.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(WAKE)
    pubsub.get_message(timeout=1)  # the subscribe confirmation

    def woken() -> int | None:
        message = pubsub.get_message(timeout=1)
        return None if message is None else int(float(message["data"]))

    assert fail("A", tokens["A"], backoff_ms=60_000) == "retry"  # after the head H: no wake
    assert pubsub.get_message(timeout=0.2) is None
    keys = [Q.job("B"), Q.inflight, Q.scheduled]
    assert s.release(keys, ["B", tokens["B"], 0, 1, "broker down", WAKE]) == 1
    assert woken() == score(r, Q.scheduled, "B")
    assert s.reschedule([Q.scheduled, Q.dedupe], ["B", "", "delay", 120_000, WAKE])[0] == "B"
    assert pubsub.get_message(timeout=0.2) is None
    assert s.requeue([Q.job("D"), Q.dead, Q.scheduled, Q.dedupe], ["D", 0, WAKE]) == 1
    assert woken() == score(r, Q.scheduled, "D")
    assert s.reschedule([Q.scheduled, Q.dedupe], ["B", "", "at", 5, WAKE]) == ["B", 5]
    assert woken() == 5
    pubsub.close()


@pytest.mark.parametrize("outcome", ["fail", "reap", "bury"])
def test_a_job_going_to_dead_keeps_a_key_that_moved_to_a_newer_job(
    r: redis.Redis, outcome: str
) -> None:
    enqueue("A", 0, "k", "keep", "max", "1")
    token = str(claim(visibility_ms=0)[4][0][1])
    enqueue("B", 0, "k", "replace")
    assert r.hget(Q.dedupe, "k") == "B"
    if outcome == "fail":
        assert fail("A", token, max_attempts=1) == "dead"
    elif outcome == "reap":
        assert begin("A", token)[0] == 1
        r.zadd(Q.inflight, {"A": 0})
        assert reap() == [0, 1]
    else:
        keys = [Q.job("A"), Q.inflight, Q.scheduled, Q.dead, Q.dedupe, STATS,
                Q.spec_prefix]  # fmt: skip
        assert get_scripts().bury(keys, ["A", "unknown task", STATS_TTL_SECONDS]) == 1
    assert r.zscore(Q.dead, "A") is not None
    assert r.hget(Q.dedupe, "k") == "B"


def test_cancel_keeps_a_key_that_moved_to_a_newer_job(r: redis.Redis) -> None:
    enqueue("A", 60_000, "k")
    r.hset(Q.dedupe, "k", "B")  # as if a newer job had taken the key
    assert get_scripts().cancel(CANCEL_KEYS, ["A", ""]) == [1, "A"]
    assert r.hget(Q.dedupe, "k") == "B"


LUA = Path(scripts.__file__).parent / "lua"
INCLUDES = sorted(path.stem for path in LUA.glob("_*.lua"))
TRANSITIONS = sorted(path.stem for path in LUA.glob("[a-z]*.lua"))
DEFINED = re.compile(r"^local (?:function )?([A-Za-z_]\w*)", re.MULTILINE)
INCLUDE_LINE = re.compile(r"^-- #include (_\w+)\.lua$", re.MULTILINE)


@pytest.mark.parametrize("name", INCLUDES)
def test_each_include_opens_with_what_it_provides(name: str) -> None:
    assert (LUA / f"{name}.lua").read_text().startswith("-- Provides ")


@pytest.mark.parametrize("name", TRANSITIONS + INCLUDES)
def test_a_script_has_each_include_once_and_uses_what_it_includes(name: str) -> None:
    source = scripts.load_source(name)
    assert "-- #include" not in source
    names = DEFINED.findall(source)
    assert len(names) == len(set(names)), f"{name} defines a name twice"
    # Each include a file names provides something that file uses itself.
    own = (LUA / f"{name}.lua").read_text()
    body = INCLUDE_LINE.sub("", own)
    for helper in INCLUDE_LINE.findall(own):
        provided = DEFINED.findall((LUA / f"{helper}.lua").read_text())
        assert any(re.search(rf"\b{p}\b", body) for p in provided), f"{name}: unused {helper}"


def test_every_helper_a_script_calls_is_included() -> None:
    helpers = {n for inc in INCLUDES for n in DEFINED.findall((LUA / f"{inc}.lua").read_text())}
    for name in TRANSITIONS + INCLUDES:
        own = (LUA / f"{name}.lua").read_text()
        included = scripts.load_source(name).removesuffix(own.rpartition("\n-- #include ")[2])
        body = own.rpartition("\n-- #include ")[2]
        for helper in helpers - set(DEFINED.findall(body)):
            if re.search(rf"\b{helper}\b", body):
                assert re.search(rf"^local (?:function )?{helper}\b", included, re.MULTILINE), (
                    f"{name} uses {helper} without including it"
                )


def test_a_script_leaves_out_the_helpers_it_never_names() -> None:
    """Every call of a script runs each definition it holds (Redis keeps nothing between
    calls): the limits' gate, which enqueue and fire never use, is not in their sources,
    while what they use (and what that uses) is."""
    for name in ("enqueue", "fire", "plan_schedule"):
        source = scripts.load_source(name)
        assert "local function admit(" not in source and "local function limit_gate(" not in source
        assert "local function limits_of(" in source
    assert "local function admit(" in scripts.load_source("claim")
    # what only a comment names is left out; what a string holds after "--" is not a comment
    lua = (
        "local function a() return 1 end\n"
        "local function b()\n  return a()\nend\n"
        "local function c()\n  return 2\nend\n"
        "local function d()\n  return 3\nend\n"
        "-- c is not used\nreturn {b(), '--', d()}\n"
    )
    kept = scripts._without_unused(lua)
    assert "function b(" in kept and "function d(" in kept and "function c(" not in kept


# ---- one keyless job: enqueue's straight path (the plain layout of one job) ----------------


def enqueue_plain(job_id: str, delay_ms: int = 0, vt: str = "") -> list[Any]:
    """One keyless job of tests.support.jobs.record('x') in enqueue's plain layout, as
    delay_for sends it: [Redis's clock] when it wrote the job, else each job's reply."""
    spec = pack("tests.support.jobs.record", '["x"]', "", "3", vt, "")
    return get_scripts().enqueue(
        [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix],
        [WAKE, WAKE_HORIZON_MS, "plain", "delay", job_id, delay_ms, spec],
    )


def test_one_keyless_job_sent_again_before_its_claim_moves_and_takes_the_new_spec(
    r: redis.Redis,
) -> None:
    [first_now] = enqueue_plain("A", 60_000)
    [again_now] = enqueue_plain("A", 120_000, "5000")
    assert r.zscore(Q.scheduled, "A") == again_now + 120_000 >= first_now + 120_000
    assert job(r, "A")["vt"] == "5000" and not r.exists(Q.job("A"))


def test_one_keyless_job_sent_again_after_its_claim_is_not_put_back(r: redis.Redis) -> None:
    enqueue_plain("A", 0)
    assert [j[0] for j in claim()[4]] == ["A"]
    [(job_id, _, outcome, state)] = enqueue_plain("A", 0)
    assert (job_id, outcome, state) == ("A", "created", "inflight")
    assert r.zcard(Q.scheduled) == 0 and packed_specs(r, Q) == {}


@pytest.mark.parametrize("again", [False, True])
def test_one_keyless_job_whose_bucket_is_not_a_hash_leaves_the_scheduled_zset_as_it_was(
    r: redis.Redis, again: bool
) -> None:
    """The straight path adds the job to the zset before it finds its bucket is not a hash:
    the job leaves it again, or (the call sent again before a claim) stays where it was."""
    enqueue_plain("OTHER", 5000)
    if again:
        enqueue_plain("A", 5000)
    bucket = f"{Q.spec_prefix}A"  # the bucket of id "A"
    r.delete(bucket)
    r.set(bucket, "planted")
    before = r.zrange(Q.scheduled, 0, -1, withscores=True)
    message = f"WRONGTYPE delayqueue: {bucket} is a string, not a hash"
    with pytest.raises(redis.ResponseError, match=f"^{re.escape(message)}$"):
        enqueue_plain("A", 60_000)
    assert r.zrange(Q.scheduled, 0, -1, withscores=True) == before
    assert r.get(bucket) == "planted"


def test_a_pipeline_keeps_its_order_when_redis_never_saw_its_first_script(
    r: redis.Redis,
) -> None:
    """A rider's call goes before the ack in one pipeline (runner/riders.py): were its script
    refused as unknown while the next call ran, the two would run in the wrong order."""
    from delayqueue.engine import execution

    spec = pack(TASK, '["x"]', "", "3", "", "")
    job_id = new_job_id()
    made = transitions.NewJob(job_id, "delay", 60_000, "", "keep", spec)
    r.script_flush()
    execution._loaded.clear()
    r.script_load(get_scripts()["cancel"].script)  # Redis knows only the second call's script
    written, cancelled = execution.run_many(
        [transitions.enqueue(Q, [made], wake_horizon_ms=WAKE_HORIZON_MS),
         transitions.cancel(Q, job_id=job_id)]
    )  # fmt: skip
    assert [w.id for w in written] == [job_id] and cancelled.removed
    assert not exists(r, job_id)  # written, then cancelled: in the order given


@pytest.mark.parametrize("first", ["plain-first", "plain"])
def test_one_keyless_job_is_coded_as_a_batch_codes_its_spec(r: redis.Redis, first: str) -> None:
    """The straightest path codes the usual spec itself (its code, then its args) once its
    task has a code; other specs go on to code_spec: either way as a batch's job's."""
    keys = [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix, Q.tasks]

    def in_bucket(job_id: str) -> str:
        return str(r.hget(Q.spec_bucket(job_id), job_id))

    specs = [
        pack(TASK, '["x"]', "", "3", ""),  # the usual one
        pack(TASK, '["x"]', "", "3", "5000"),
        pack(TASK, '["x"]', '{"k": 1}', "3", ""),
        pack(TASK, '["x"]', "", "3", "", trace="00-" + "1" * 32 + "-" + "2" * 16 + "-01"),
        pack(TASK, "[]", "", "", ""),
    ]
    for spec in specs:  # each spec's code made first (by a batch), then one job alone
        two = [new_job_id(), new_job_id()]
        batch: list[Any] = [two[0], 0, spec, two[1], 0, spec]
        get_scripts().enqueue(keys, [WAKE, WAKE_HORIZON_MS, first, "delay", *batch])
        one = new_job_id()
        [now] = get_scripts().enqueue(keys, [WAKE, WAKE_HORIZON_MS, first, "delay", one, 0, spec])
        assert in_bucket(one) == in_bucket(two[0]) == in_bucket(two[1]) != spec
        assert in_bucket(one).startswith("\x01") and r.zscore(Q.scheduled, one) == now
        assert packed_specs(r, Q)[one] == spec
    new = new_job_id()  # a task without a code yet: the path after the helpers makes it
    spec = pack("tests.support.jobs.always_fails", "[1]", "", "", "")
    get_scripts().enqueue(keys, [WAKE, WAKE_HORIZON_MS, first, "delay", new, 0, spec])
    code = str(r.hget(Q.tasks, "tests.support.jobs.always_fails\n\n"))
    assert code.startswith("\x01") and in_bucket(new) == code + "[1]"


MIN_TIME_MS, MAX_TIME_MS = -62135596800000, 253402300799999  # (lua/_bounds.lua)
CODED_KEYS = [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix, Q.tasks]
USUAL_SPEC = pack(TASK, '["x"]', "", "3", "")  # (the spec the straightest path codes)


def code_the_task(first: str) -> None:
    """Two jobs of TASK in one call: its code is made (as a batch makes it)."""
    made: list[Any] = [new_job_id(), 0, USUAL_SPEC, new_job_id(), 0, USUAL_SPEC]
    get_scripts().enqueue(CODED_KEYS, [WAKE, WAKE_HORIZON_MS, first, "delay", *made])


def enqueue_coded(
    first: str, mode: str, ms: Any, horizon: Any = WAKE_HORIZON_MS, job_id: str = "A"
) -> Any:
    """One keyless job of TASK in the plain layout with the tasks hash: the job the
    straightest path takes once TASK has its code, when its arguments are good."""
    args = [WAKE, horizon, first, mode, job_id, ms, USUAL_SPEC]
    return get_scripts().enqueue(CODED_KEYS, args)


@pytest.mark.parametrize("first", ["plain-first", "plain"])
@pytest.mark.parametrize(
    ("mode", "ms", "horizon"),
    [
        *[("delay", ms, WAKE_HORIZON_MS) for ms in ["abc", "", "nan", "inf", "-inf", "-1"]],
        ("delay", "1e300", WAKE_HORIZON_MS),
        ("delay", MAX_TIME_MS, WAKE_HORIZON_MS),  # (after year 9999 once the clock is added)
        ("at", MIN_TIME_MS - 1, WAKE_HORIZON_MS),
        ("at", MAX_TIME_MS + 1, WAKE_HORIZON_MS),
        ("at", "nan", WAKE_HORIZON_MS),
        ("soon", 0, WAKE_HORIZON_MS),
        *[("delay", 0, horizon) for horizon in ["nan", "-1", MAX_TIME_MS + 1, "x"]],
    ],
)
def test_one_keyless_job_refuses_what_a_batch_refuses_and_writes_nothing(
    r: redis.Redis, first: str, mode: str, ms: Any, horizon: Any
) -> None:
    """The straightest path checks its job's time and the horizon itself (the bounds of
    lua/_bounds.lua written out): what the general path refuses, it leaves to it."""
    code_the_task(first)
    before = (r.zrange(Q.scheduled, 0, -1, withscores=True), packed_specs(r, Q))
    with pytest.raises(redis.ResponseError, match="^enqueue: "):
        enqueue_coded(first, mode, ms, horizon)
    assert (r.zrange(Q.scheduled, 0, -1, withscores=True), packed_specs(r, Q)) == before


@pytest.mark.parametrize("first", ["plain-first", "plain"])
@pytest.mark.parametrize(("mode", "ms"), [("at", MIN_TIME_MS), ("at", MAX_TIME_MS), ("delay", 0)])
def test_one_keyless_job_at_the_bounds_is_written(
    r: redis.Redis, first: str, mode: str, ms: int
) -> None:
    code_the_task(first)
    [now] = enqueue_coded(first, mode, ms)
    assert r.zscore(Q.scheduled, "A") == (ms if mode == "at" else now)
    assert packed_specs(r, Q)["A"] == USUAL_SPEC
