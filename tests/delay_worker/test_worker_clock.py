"""The delay worker's Redis clock estimate and its reaping only when a deadline has come."""

from __future__ import annotations

import time

import redis
from celery import Celery

from delayqueue.engine.clients import redis_now_ms
from delayqueue.engine.keys import queue_keys
from delayqueue.worker.clock import RedisClock
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs

Q = queue_keys("tests")


def test_clock_estimate_is_a_lower_bound_that_closes_in() -> None:
    clock = RedisClock()
    offset = 1_000_000.3  # true Redis ms minus monotonic ms
    mono = 100.0
    for _ in range(2000):
        mono += 0.000437  # a pass every 0.437 ms
        redis_read = (mono - 0.00005) * 1000 + offset  # Redis read TIME 50 us before the reply
        clock.observe(int(redis_read), mono)
        assert clock.offset_ms is not None and clock.offset_ms <= offset
    assert clock.offset_ms is not None
    assert offset - clock.offset_ms < 0.1  # within 0.1 ms of the truth
    # waking for a point is never before Redis reaches it, and no more than 0.1 ms after
    point = int(mono * 1000 + offset) + 7
    true_mono = (point - offset) / 1000
    assert 0 <= clock.monotonic_at(point) - true_mono < 0.0001


def test_worker_wakes_on_time_and_does_not_spin_when_the_estimate_is_ahead(
    r: redis.Redis, parked_celery: Celery
) -> None:
    # Wake-ups are read against the job's due time on this process's clock, not against
    # the time a pass returned, which a loaded machine delays.
    before = time.monotonic()
    jobs.record.delay_for("later", seconds=2, on_commit=False)
    worker = DelayWorker(["tests"], celery_app=parked_celery)
    result = worker.run_pass()
    due = result.wake_at  # when the job is to be handed over, by the estimate
    assert before + 1.9 < due <= time.monotonic() + 2.0  # (less the dispatch ahead)
    # Redis's clock set back 1 s (failover to another host): the estimate is 1 s ahead
    assert worker.clock.offset_ms is not None
    worker.clock.offset_ms += 1000
    result = worker.run_pass()
    assert not result.claimed
    assert 0.95 < due - result.wake_at < 1.05  # 1 s early, by the estimate
    # Waking early, Redis says the job is not due: a wasted pass or two, then the estimate
    # is dropped and the worker sleeps until the job is due; no busy loop.
    time.sleep(max(0.0, result.wake_at - time.monotonic()))
    result, passes = worker.run_pass(), 1
    while due - result.wake_at > 0.5:
        assert not result.claimed
        time.sleep(max(0.0, result.wake_at - time.monotonic()))
        result, passes = worker.run_pass(), passes + 1
    assert not result.claimed
    assert passes <= 2
    assert -0.01 < result.wake_at - due < 0.1
    time.sleep(max(0.0, result.wake_at - time.monotonic()))
    assert len(worker.run_pass().claimed) == 1


def test_a_queue_is_reaped_when_its_deadline_comes_not_on_every_pass(
    r: redis.Redis, parked_celery: Celery
) -> None:
    jobs.record.delay_for("now", seconds=0, on_commit=False)
    worker = DelayWorker(["tests"], visibility_timeout=0.3, celery_app=parked_celery)
    assert len(worker.run_pass().claimed) == 1
    deadline = int(float(r.zrange(Q.inflight, 0, 0, withscores=True)[0][1]))
    assert worker._reap_state["tests"][0] > time.monotonic() + 0.2
    # passes before the deadline leave the job in flight; the pass after it reaps and
    # claims it again (a dispatch that never started: not an attempt)
    worker.run_pass()
    assert r.zcard(Q.inflight) == 1
    while redis_now_ms(r) < deadline:
        time.sleep(0.01)
    time.sleep(0.002)
    result = worker.run_pass()
    assert len(result.claimed) == 1
