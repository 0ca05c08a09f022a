"""Expiry: a job that cannot start by its due time + expires is dead ("expired"), never run,
whether found at claim, at start on the Celery side, or when a retry would start too late."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.test import override_settings

from delayqueue import signals
from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import queue_keys
from delayqueue.runner.job import run_job
from delayqueue.worker.loop import DelayWorker
from tests.support import limit_tasks

Q = queue_keys(limit_tasks.QUEUE)


def claim() -> transitions.Claim:
    return run(transitions.claim(Q, limit=100, visibility_ms=30_000))


def test_a_job_past_its_expiry_at_claim_is_dead_expired_and_signalled(
    r: redis.Redis, parked_celery: Celery
) -> None:
    late = limit_tasks.expiring.delay_for("late", seconds=0, expires=0.05, on_commit=False)
    fresh = limit_tasks.expiring.delay_for("fresh", seconds=0, on_commit=False)  # the task's 30 s
    time.sleep(0.1)
    seen: list[dict[str, Any]] = []

    def receiver(sender: str, **kwargs: Any) -> None:
        seen.append({"sender": sender, **kwargs})

    signals.job_expired.connect(receiver)
    try:
        with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "SAFETY_POLL": 60}):
            result = DelayWorker([limit_tasks.QUEUE], celery_app=parked_celery).run_pass()
    finally:
        signals.job_expired.disconnect(receiver)
    assert [job.id for job in result.claimed] == [fresh.id]
    assert r.zscore(Q.dead, late.id) is not None
    assert r.hget(Q.job(late.id), "why") == "expired"
    assert [(s["sender"], s["job_id"]) for s in seen] == [("delay_worker", late.id)]
    stats = r.hgetall(next(iter(r.scan_iter(match=Q.base + ":stats:*"))))
    assert stats["expired"] == "1"


def test_a_key_of_an_expired_job_is_free_again(r: redis.Redis) -> None:
    limit_tasks.expiring.delay_for("k", seconds=0, expires=0.01, key="k", on_commit=False)
    time.sleep(0.05)
    assert len(claim().expired) == 1
    again = limit_tasks.expiring.delay_for("k2", seconds=0, key="k", on_commit=False)
    assert again.outcome == "created"


def test_a_dispatch_that_waited_past_its_expiry_does_not_run(r: redis.Redis) -> None:
    job = limit_tasks.expiring.delay_for("held", seconds=0, expires=0.1, on_commit=False)
    claimed = claim().jobs[0]
    time.sleep(0.15)  # on the broker, behind a backlog
    ran: list[str] = []
    result = run_job(
        lambda tag: ran.append(tag), ["held"], {}, (Q.queue, job.id, str(claimed.token))
    )
    assert result is None and ran == []
    assert r.zscore(Q.dead, job.id) is not None and r.zscore(Q.inflight, job.id) is None
    assert r.hget(Q.job(job.id), "why") == "expired"


def test_a_retry_that_would_start_past_the_expiry_goes_to_dead(r: redis.Redis) -> None:
    job = limit_tasks.failing_expiring.delay_for("f", seconds=0, on_commit=False)  # 0.5 s
    claimed = claim().jobs[0]
    outcome = run(
        transitions.fail(
            Q,
            job.id,
            str(claimed.token),
            backoff_ms=1_000,
            error="E",
            traceback="",
            max_attempts=5,
            dead_max=100,
        )  # fmt: skip
    )
    assert outcome == "dead" and r.hget(Q.job(job.id), "why") == "expired"


def test_a_retry_within_the_expiry_is_scheduled(r: redis.Redis) -> None:
    job = limit_tasks.failing_expiring.delay_for("f", seconds=0, expires=60, on_commit=False)
    claimed = claim().jobs[0]
    outcome = run(
        transitions.fail(
            Q,
            job.id,
            str(claimed.token),
            backoff_ms=1_000,
            error="E",
            traceback="",
            max_attempts=5,
            dead_max=100,
        )  # fmt: skip
    )
    assert outcome == "retry"


@pytest.mark.parametrize("expires", [0, -1, 0.0, float("nan"), "10", True])
def test_a_bad_expires_is_refused_at_the_call(r: redis.Redis, expires: Any) -> None:
    from delayqueue.errors import InvalidOption

    with pytest.raises(InvalidOption, match="expires"):
        limit_tasks.expiring.delay_for("x", seconds=0, expires=expires, on_commit=False)
    assert r.zcard(Q.scheduled) == 0


def test_an_expired_job_retried_by_an_operator_runs(r: redis.Redis) -> None:
    job = limit_tasks.expiring.delay_for("late", seconds=0, expires=0.01, on_commit=False)
    time.sleep(0.05)
    assert claim().expired == [job.id]
    assert run(transitions.requeue(Q, job.id)) == "requeued"
    assert [claimed.id.decode() for claimed in claim().jobs] == [job.id]
