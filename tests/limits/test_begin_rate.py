"""The rate checked again at the Celery side's start (begin.lua, docs/limits.md "Clock and
skew"): a job handed off so late that the next window's jobs started before it is put back,
not run. Run directly on the suite's Redis."""

from __future__ import annotations

import json
import logging
import time

import pytest
import redis
from celery import Celery

from delayqueue import signals
from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.worker.loop import DelayWorker
from tests.delay_worker.test_batches import published, run_messages
from tests.limits.test_claim_limits import Q, claim, scores, state
from tests.support import limit_tasks


def text(value: bytes | int) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def begin(job: transitions.ClaimedJob) -> transitions.Begun:
    return run(transitions.begin(Q, job.id.decode(), text(job.token), visibility_ms=30_000))


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_a_job_that_begins_after_the_next_windows_starts_is_put_back_not_run(
    r: redis.Redis,
) -> None:
    for i in range(10):
        limit_tasks.rated.delay_for(f"j{i}", seconds=0, on_commit=False)  # 5/s
    first = claim()
    assert len(first.jobs) == 5 and first.held == 5
    *prompt, late = first.jobs
    began = [begin(job) for job in prompt]
    assert all(b.run and b.rated for b in began), began
    time.sleep(1.05)  # the claim's window is over; the late job has not started yet
    second = claim()
    assert len(second.jobs) == 5  # the claim counts reservations: its window looks free
    began = [begin(job) for job in second.jobs]
    assert all(b.run for b in began)
    log = state(limit_tasks.rated.name, ":r")
    first_start = min(scores(r, log))

    # The late job starts now: with it, the window up to now would hold six starts.
    late_id = late.id.decode()
    put_back = begin(late)
    assert not put_back.run and put_back.limited_until is not None
    assert r.zscore(Q.inflight, late_id) is None  # not running, not lost: scheduled again
    assert r.zscore(Q.scheduled, late_id) == put_back.limited_until
    # due when the oldest start of the window leaves it
    assert put_back.limited_until == first_start + 1000
    assert r.zscore(log, f"{late_id}:{text(late.token)}") is None and r.zcard(log) == 5
    job = r.hgetall(Q.job(late_id))
    assert job["att"] == "0" and "began" not in job  # its attempt is given back
    assert json.loads(job["hist"])[-1]["outcome"] == "released"
    assert not begin(late).run  # a resent begin finds it stale

    # Claimed again when the limit allows, it starts then.
    time.sleep(max(0.0, (put_back.limited_until - redis_ms(r)) / 1000) + 0.01)
    again = [job for job in claim().jobs if job.id.decode() == late_id]
    assert again and text(again[0].attempt) == "1" and begin(again[0]).run


def test_a_put_back_job_frees_its_slot_and_wakes_the_next_waiter(r: redis.Redis) -> None:
    for i in range(2):
        limit_tasks.keyed.delay_for(f"k{i}", seconds=0, on_commit=False)  # 4/s, one at once
    first = claim()
    assert len(first.jobs) == 1 and first.held == 1
    job = first.jobs[0]
    waiter = str(r.zrange(Q.scheduled, 0, -1)[0])
    assert (r.zscore(Q.scheduled, waiter) or 0) > first.now_ms  # waits for the slot
    # Four other starts came first in this window (a dispatch handed off late).
    log = state(limit_tasks.keyed.name, ":r")
    now = redis_ms(r)
    r.zadd(log, {f"other{i}:1": now for i in range(4)})
    assert not begin(job).run
    assert r.zcard(state(limit_tasks.keyed.name, ":c")) == 0  # its slot is free
    woken = r.zscore(Q.scheduled, waiter)
    assert woken is not None and woken <= redis_ms(r)  # and the waiter is due now


def test_a_job_claimed_ahead_is_counted_at_its_due_time(r: redis.Redis) -> None:
    limit_tasks.rated.delay_for("ahead", seconds=0.5, on_commit=False)
    claimed = claim(ahead_ms=1000)
    job = claimed.jobs[0]
    due = int(job.due_ms) if job.due_ms else 0
    assert due > claimed.now_ms
    log = state(limit_tasks.rated.name, ":r")
    assert begin(job).run
    assert (
        r.zscore(log, f"{job.id.decode()}:{text(job.token)}") == due
    )  # held until then: its start


def test_a_later_job_of_a_batch_is_counted_at_its_own_start(
    r: redis.Redis, parked_celery: Celery
) -> None:
    made = limit_tasks.rated_slow_batched.delay_many([("s0",), ("s1",)], seconds=0, on_commit=False)
    DelayWorker([limit_tasks.QUEUE], celery_app=parked_celery).run_pass()
    [message] = published()
    assert len(message["args"][2]) == 2  # both in one batch, begun in one round trip
    run_messages(parked_celery, [message])
    log = state(limit_tasks.rated_slow_batched.name, ":r")
    entries = message["args"][2]  # (run in this order)
    assert sorted(entry[0] for entry in entries) == sorted(job.id for job in made)
    first, second = (r.zscore(log, f"{entry[0]}:{entry[1]}") for entry in entries)
    assert first is not None and second is not None
    # The second started after the first ran 30 ms: begun again, it is counted then.
    assert second - first >= 30, (first, second)
    assert len(limit_tasks.runs("rated_slow_batched")) == 2


def test_the_celery_side_does_not_run_a_job_put_back_at_its_start(
    r: redis.Redis, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    made = limit_tasks.rated.delay_for("put-back", seconds=0, on_commit=False)
    DelayWorker([limit_tasks.QUEUE], celery_app=parked_celery).run_pass()
    [message] = published()
    # Five other starts came first in this window (dispatches handed off late).
    log = state(limit_tasks.rated.name, ":r")
    r.zadd(log, {f"other{i}:1": redis_ms(r) for i in range(5)})
    sent: list[dict[str, object]] = []

    def receiver(sender: str, **kwargs: object) -> None:
        sent.append({"sender": sender, **kwargs})

    signals.job_limited.connect(receiver)
    try:
        with caplog.at_level(logging.INFO, logger="delayqueue"):
            run_messages(parked_celery, [message])
    finally:
        signals.job_limited.disconnect(receiver)
    assert limit_tasks.runs("rated") == []  # the task's code never ran
    assert r.zscore(Q.scheduled, made.id) is not None and r.zcard(Q.inflight) == 0
    assert sent == [
        {"sender": signals.SENDER_CELERY_WORKER, "signal": signals.job_limited,
         "queue": limit_tasks.QUEUE, "count": 1}
    ]  # fmt: skip
    assert any("over its rate at its start" in rec.getMessage() for rec in caplog.records)


def test_a_begin_counts_the_job_at_a_horizon_only_while_the_window_is_far_from_its_rate(
    r: redis.Redis,
) -> None:
    for i in range(3):
        limit_tasks.rated.delay_for(f"h{i}", seconds=0, on_commit=False)  # 5/s
    first, *rest = claim().jobs
    log = state(limit_tasks.rated.name, ":r")

    def begin_batched(job: transitions.ClaimedJob, after: int) -> transitions.Begun:
        call = transitions.begin(
            Q, job.id.decode(), text(job.token), visibility_ms=30_000, horizon_ms=60_000,
            after=after,
        )  # fmt: skip
        return run(call)

    # 3 starts in the window, none more to come: at most half the rate (5) is 2, so no horizon
    near = begin_batched(first, 0)
    assert near.run and near.counted_ms is not None and near.now_us is not None
    assert near.counted_ms == max(near.now_us // 1000, near.counted_ms)
    assert near.counted_ms - near.now_us // 1000 <= 1
    assert r.zscore(log, f"{first.id.decode()}:{text(first.token)}") == near.counted_ms

    # With a window far from its rate: counted at the horizon (a tenth of the window, 100
    # ms), the entry marked by its half ms; a resent begin keeps it.
    r.delete(log)
    roomy = begin_batched(rest[0], 1)  # itself and one more: 2 starts of 5
    assert roomy.run and roomy.counted_ms is not None and roomy.now_us is not None
    assert roomy.counted_ms == roomy.now_us // 1000 + 100
    member = f"{rest[0].id.decode()}:{text(rest[0].token)}"
    assert r.zscore(log, member) == roomy.counted_ms + 0.5
    again = begin_batched(rest[0], 3)  # (now too near the rate for a horizon of its own)
    assert again.counted_ms == roomy.counted_ms and r.zscore(log, member) == roomy.counted_ms + 0.5


def test_a_batch_far_from_its_rate_begins_each_job_once_and_starts_it_before_its_count(
    r: redis.Redis, parked_celery: Celery
) -> None:
    made = limit_tasks.rated_roomy_batched.delay_many(
        [(f"b{i}",) for i in range(4)], seconds=0, on_commit=False
    )
    DelayWorker([limit_tasks.QUEUE], celery_app=parked_celery).run_pass()
    [message] = published()
    assert len(message["args"][2]) == 4
    run_messages(parked_celery, [message])  # 10 ms each: all within the 100 ms horizon
    log = state(limit_tasks.rated_roomy_batched.name, ":r")
    scores = [r.zscore(log, f"{entry[0]}:{entry[1]}") for entry in message["args"][2]]
    entries = [score for score in scores if score is not None]
    assert len(entries) == 4 and all(score % 1 == 0.5 for score in entries)  # at the horizon
    # one begin, in one round trip, for all four: a job begun again after the first ran (10
    # ms) would be counted 10 ms later at least
    assert max(entries) - min(entries) < 10
    runs = limit_tasks.runs("rated_roomy_batched")
    assert sorted(str(run["tag"]) for run in runs) == sorted(f"b{i}" for i in range(4))
    assert len(made) == 4
    # each started (Redis's clock, read by the task) no later than the instant counted
    assert all(float(str(run["redis_start"])) * 1000 <= min(entries) for run in runs)
