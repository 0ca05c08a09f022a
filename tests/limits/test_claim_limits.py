"""Rate, concurrency and limit keys in the claim step, run directly on the suite's Redis."""

from __future__ import annotations

import time
from typing import cast

import redis

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import limit_name, queue_keys
from tests.support import limit_tasks

Q = queue_keys(limit_tasks.QUEUE)


def claim(ahead_ms: int = 0, limit: int = 100) -> transitions.Claim:
    return run(transitions.claim(Q, limit=limit, visibility_ms=30_000, ahead_ms=ahead_ms))


def scores(r: redis.Redis, key: str) -> list[float]:
    """The scores of sorted set ``key``, lowest first."""
    pairs = cast(list[tuple[str, float]], r.zrange(key, 0, -1, withscores=True))
    return [score for _, score in pairs]


def state(task: str, suffix: str, limit_key: str = "") -> str:
    return Q.limit_prefix + limit_name(task, limit_key) + suffix


def test_a_rate_claims_n_per_window_and_keeps_the_rest_scheduled_at_the_next_instants(
    r: redis.Redis,
) -> None:
    ids = {limit_tasks.rated.delay_for(f"j{i}", seconds=0, on_commit=False).id for i in range(12)}
    first = claim()
    assert len(first.jobs) == 5 and first.held == 7
    assert r.zcard(Q.inflight) == 5 and r.zcard(Q.scheduled) == 7  # none lost
    assert {job.id.decode() for job in first.jobs} | set(r.zrange(Q.scheduled, 0, -1)) == ids
    # the held jobs are due when the log makes room: five a window on, two a window later
    dues = scores(r, Q.scheduled)
    assert all(first.now_ms + 1000 <= due <= first.now_ms + 1010 for due in dues[:5])
    assert all(first.now_ms + 2000 <= due <= first.now_ms + 2010 for due in dues[5:])
    assert first.next_due_ms == dues[0]  # the worker sleeps until then
    assert claim().jobs == []  # nothing more now: no spin
    log = state(limit_tasks.rated.name, ":r")
    assert r.zcard(log) == 5 and 0 < r.pttl(log) <= 1000  # idle state expires


def test_concurrency_holds_the_rest_and_a_finishing_job_wakes_the_next(r: redis.Redis) -> None:
    for i in range(5):
        limit_tasks.concurrent.delay_for(f"c{i}", 0.0, seconds=0, on_commit=False)
    first = claim()
    assert len(first.jobs) == 2 and first.held == 3
    waiting = state(limit_tasks.concurrent.name, ":w")
    assert r.zcard(waiting) == 3
    # the held jobs wait (scheduled) until the earliest slot's deadline at the latest
    deadline = min(scores(r, Q.inflight))
    assert all(score == deadline for score in scores(r, Q.scheduled))
    done = first.jobs[0]
    with r.pubsub() as channel:
        channel.subscribe(Q.wake)
        channel.get_message(timeout=1)
        assert run(transitions.ack(Q, done.id.decode(), str(done.token)))
        woken = channel.get_message(timeout=1)
    assert woken is not None and woken["type"] == "message"
    second = claim()
    assert len(second.jobs) == 1 and r.zcard(waiting) == 2
    assert r.zcard(state(limit_tasks.concurrent.name, ":c")) == 2


def test_a_failure_or_a_reap_gives_the_slot_back(r: redis.Redis) -> None:
    for i in range(4):
        limit_tasks.concurrent.delay_for(f"c{i}", 0.0, seconds=0, on_commit=False)
    first = claim()
    running = state(limit_tasks.concurrent.name, ":c")
    failed = first.jobs[0]
    outcome = run(
        transitions.fail(
            Q,
            failed.id.decode(),
            str(failed.token),
            backoff_ms=60_000,
            error="E",
            traceback="",
            max_attempts=5,
            dead_max=100,
        )  # fmt: skip
    )
    assert outcome == "retry" and r.zcard(running) == 1
    r.zadd(Q.inflight, {first.jobs[1].id.decode(): 1})  # its worker died: deadline passed
    assert run(transitions.reap(Q, limit=10, max_attempts=5)).rescheduled == 1
    assert r.zcard(running) == 0
    assert len(claim().jobs) == 2  # the two that waited (the reaped one is due too, after)


def test_each_limit_key_has_a_budget_of_its_own(r: redis.Redis) -> None:
    for key in ("provider:a", "provider:b"):
        for i in range(3):
            limit_tasks.keyed.delay_for(f"{key}-{i}", seconds=0, limit_key=key, on_commit=False)
    limit_tasks.keyed.delay_for("none", seconds=0, on_commit=False)
    first = claim()
    assert len(first.jobs) == 3 and first.held == 4  # one each (concurrency 1): a, b, no key
    assert r.zcard(state(limit_tasks.keyed.name, ":c", "provider:a")) == 1
    assert r.zcard(state(limit_tasks.keyed.name, ":c", "provider:b")) == 1
    assert r.zcard(state(limit_tasks.keyed.name, ":c")) == 1


def test_a_job_claimed_ahead_counts_at_its_due_time(r: redis.Redis) -> None:
    for i in range(6):
        limit_tasks.rated.delay_for(f"a{i}", seconds=0.5, on_commit=False)
    time.sleep(0.1)
    result = claim(ahead_ms=1000)
    assert len(result.jobs) == 5 and result.held == 1
    log = scores(r, state(limit_tasks.rated.name, ":r"))
    assert all(score >= result.now_ms + 300 for score in log)  # at their due times


def most_in_a_window(times: list[float], window: float) -> int:
    ordered, best, low = sorted(times), 0, 0
    for high, t in enumerate(ordered):
        while ordered[low] <= t - window:
            low += 1
        best = max(best, high - low + 1)
    return best


def test_a_burst_held_over_several_claims_is_spread_at_the_rate_not_piled_on_one_window(
    r: redis.Redis,
) -> None:
    # 40 due at once, claimed 10 at a time (a worker's batch): each claim holds back what the
    # rate does not allow. Every job held goes after those earlier claims held, so the due
    # times hold at most the rate in any window: no claim finds the whole backlog due again
    # at the next window and moves it once more (a claim's work would grow with the
    # backlog, once per window: the BUSY script a bench saw at 100/s).
    for i in range(40):
        limit_tasks.rated.delay_for(f"j{i}", seconds=0, on_commit=False)  # 5/s
    claims = [claim(limit=10) for _ in range(5)]
    assert [len(c.jobs) for c in claims] == [5, 0, 0, 0, 0]
    assert sum(c.held for c in claims) == 35 and r.zcard(Q.scheduled) == 35
    dues = scores(r, Q.scheduled)
    assert most_in_a_window(dues, 1000) <= 5
    now = claims[0].now_ms
    assert now + 1000 <= dues[0] and dues[-1] <= now + 7000 + 100  # 7 windows, no gap
    held = state(limit_tasks.rated.name, ":d")
    assert r.zcard(held) == 35 and 0 < r.pttl(held) <= 8200  # idle state expires

    # A job held again (its room taken by a start later than its claim counted) goes to the
    # first room, ahead of the jobs still waiting, not after them.
    log = state(limit_tasks.rated.name, ":r")
    first = str(r.zrange(Q.scheduled, 0, 0)[0])
    r.zadd(Q.scheduled, {first: now})
    r.zadd(log, {f"late{i}:1": dues[0] for i in range(5)})  # the window is full again
    again = claim(limit=1)
    assert again.jobs == [] and again.held == 1
    assert (r.zscore(Q.scheduled, first) or 0) <= dues[0] + 1000 + 10


def test_a_held_job_claimed_ahead_of_its_room_is_claimed_not_held_again(r: redis.Redis) -> None:
    # The window is full now, but the held jobs' due times are where it has room: a worker
    # claiming ahead of them (DISPATCH_AHEAD) counts the window up to their due times and
    # claims them, instead of holding them again at the same instant at every pass.
    for i in range(10):
        limit_tasks.rated.delay_for(f"j{i}", seconds=0, on_commit=False)  # 5/s
    first = claim()
    assert len(first.jobs) == 5 and first.held == 5
    dues = scores(r, Q.scheduled)
    ahead = claim(ahead_ms=1000)
    assert len(ahead.jobs) == 5 and ahead.held == 0
    assert sorted(int(job.due_ms or 0) for job in ahead.jobs) == dues
    log = scores(r, state(limit_tasks.rated.name, ":r"))
    assert most_in_a_window(log, 1000) <= 5 and log[-5:] == dues  # counted at their dues
