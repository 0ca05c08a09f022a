"""Jobs in each state, made at once on the suite's Redis through the engine's own calls:
scheduled (``schedule``), in flight (``make_inflight``: claimed as a delay worker claims), dead
(``make_dead``: failed its only attempt), and reads of Redis's clock and a job's score."""

from __future__ import annotations

from typing import Any

import redis

from delayqueue import enqueue
from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import queue_keys
from delayqueue.producer.api import Job
from tests.support import jobs

Q = "tests"


def schedule(
    tag: str,
    *,
    seconds: float = 600,
    key: str | None = None,
    task: Any = None,
    queue: str = Q,
    **kw: Any,
) -> Job:
    """A job of ``tests.support.jobs.record`` (or ``task``) on ``queue``, written at once."""
    return enqueue(
        task or jobs.record, [tag], delay=seconds, key=key, queue=queue, on_commit=False, **kw
    )


def claim_all(queue: str = Q) -> list[transitions.ClaimedJob]:
    """Claim every due job of ``queue`` as a delay worker would (scheduled -> in flight)."""
    claim = run(transitions.claim(queue_keys(queue), limit=1000, visibility_ms=300_000))
    return claim.jobs


def make_inflight(tag: str, **kw: Any) -> Job:
    job = schedule(tag, seconds=0, **kw)
    assert job.id.encode() in [c.id for c in claim_all(job.queue)]
    return job


def make_dead(tag: str, *, error: str = "ValueError: boom", **kw: Any) -> Job:
    """A job that failed its only attempt, with an error and a traceback, now dead."""
    job = schedule(tag, seconds=0, max_attempts=1, **kw)
    claimed = {c.id.decode(): c for c in claim_all(job.queue)}
    raw_token = claimed[job.id].token
    token = raw_token.decode() if isinstance(raw_token, bytes) else str(raw_token)
    outcome = run(
        transitions.fail(
            queue_keys(job.queue),
            job.id,
            token,
            backoff_ms=0,
            error=error,
            traceback=f"Traceback (most recent call last):\n  {error}\n",
            max_attempts=5,
            dead_max=1000,
        )
    )
    assert outcome == "dead"
    return job


def score(r: redis.Redis, zset: str, job_id: str) -> float | None:
    return r.zscore(zset, job_id)


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000
