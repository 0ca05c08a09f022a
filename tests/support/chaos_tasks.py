"""The task the chaos harness schedules. Each run is recorded on a ledger Redis of its own
(``DQ_CHAOS_LEDGER_URL``), so the record survives whatever the scenario does to the
delayqueue Redis or the broker."""

from __future__ import annotations

import os
import random
import time
from functools import cache

import redis

from delayqueue import delayed_task

QUEUE = "chaos"
RUNS = "chaos:runs"  # hash: tag -> number of runs
FIRST = "chaos:first"  # hash: tag -> epoch ms of the first run (host clock of the Celery worker)
PIDS = "chaos:pids"  # set: pids of the Celery processes that ran jobs


@cache
def ledger() -> redis.Redis:
    return redis.Redis.from_url(
        os.environ["DQ_CHAOS_LEDGER_URL"], decode_responses=True, socket_timeout=10
    )


@delayed_task(queue=QUEUE, max_attempts=1000, backoff=0.2, visibility_timeout=3)
def chaos_job(tag: str, work_ms: int = 0) -> None:
    """Record one run of ``tag``; with ``work_ms``, work for up to that long first, so that a
    killed Celery worker dies in the middle of tasks."""
    _run(tag, work_ms)


@delayed_task(queue=QUEUE, max_attempts=1000, backoff=0.2, visibility_timeout=3, batch=8)
def chaos_batched_job(tag: str, work_ms: int = 0) -> None:
    """``chaos_job`` handed to Celery 8 jobs to a message."""
    _run(tag, work_ms)


def _run(tag: str, work_ms: int) -> None:
    if work_ms:
        time.sleep(random.uniform(0, work_ms) / 1000)
    pipe = ledger().pipeline(transaction=False)
    pipe.hincrby(RUNS, tag, 1)
    pipe.hsetnx(FIRST, tag, int(time.time() * 1000))
    pipe.sadd(PIDS, os.getpid())
    pipe.execute()
