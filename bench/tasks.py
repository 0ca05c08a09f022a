"""The benchmark's tasks. Each reports to Redis (database 0, beside the jobs) so the
benchmark can see what ran and when."""

from __future__ import annotations

import os
import time
from typing import Any

import redis
from celery import shared_task

from delayqueue import delayed_task

LATENESS = "bench:lateness"  # list of "due_ms started_ms"
RAN = "bench:ran"  # counter
PING = "bench:ping"

_client: redis.Redis | None = None


def client() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(os.environ["REDIS_URL"])
    return _client


@delayed_task(queue="bench")
def stamp(due_ms: int) -> None:
    """Record when it started against when it was due (lateness scenario)."""
    started_ms = time.time() * 1000
    client().rpush(LATENESS, f"{due_ms} {started_ms:.3f}")


@delayed_task(queue="bench", batch=1)
def stamp_single(due_ms: int) -> None:
    """``stamp``, never batched: one Celery message per job."""
    started_ms = time.time() * 1000
    client().rpush(LATENESS, f"{due_ms} {started_ms:.3f}")


@delayed_task(queue="bench")
def noop(n: int) -> None:
    """Count a run (dispatch end to end); the job's payload is one int."""
    client().incr(RAN)


@delayed_task(queue="bench", batch=1)
def sink(n: int) -> None:
    """Routed to a Celery queue no worker consumes: dispatch is measured on the broker, one
    message per job (the burst scenario measures batches)."""


@shared_task(name="bench.tasks.ping")
def ping(token: str) -> None:
    client().set(PING, token)


TICKS = "bench:ticks"  # list of "job_id started_ms" (periodic scenario)


@delayed_task(queue="bench", bind=True)
def tick(self: Any, tag: str) -> None:
    """An occurrence of a periodic schedule: record its job id (whose time part is the
    occurrence's instant) and when it started. Bound: in a batch message the job's own
    request (its headers) is the task's, while ``current_task`` is the batch's."""
    from delayqueue.wire import dispatch_headers

    started_ms = time.time() * 1000
    dispatch = dispatch_headers(self.request)
    client().rpush(TICKS, f"{dispatch[1] if dispatch else '?'} {started_ms:.3f}")


@shared_task(name="bench.tasks.beat_tick")
def beat_tick() -> None:
    """Celery beat's every-second entry (the baseline of the periodic scenario)."""
    client().rpush(TICKS, f"beat {time.time() * 1000:.3f}")


# Limits that are never reached (bench/limits.py: what a limit costs when it holds nothing
# back), and a rate that is (how closely it holds under a burst).
NEVER = 1_000_000_000


@delayed_task(queue="bench", rate=f"{NEVER}/s", concurrency=NEVER)
def noop_limited(n: int) -> None:
    """``noop`` with a rate and a concurrency it never reaches."""
    client().incr(RAN)


@delayed_task(queue="bench", rate=f"{NEVER}/s", concurrency=NEVER)
def stamp_limited(due_ms: int) -> None:
    """``stamp`` with a rate and a concurrency it never reaches."""
    started_ms = time.time() * 1000
    client().rpush(LATENESS, f"{due_ms} {started_ms:.3f}")


@delayed_task(queue="bench", rate="100/s")
def stamp_100(due_ms: int) -> None:
    """``stamp`` at most 100 times in any second."""
    started_ms = time.time() * 1000
    client().rpush(LATENESS, f"{due_ms} {started_ms:.3f}")
