"""Limited tasks the tests schedule (docs/limits.md). Each run reports its start and end
(time.time() of the Celery worker's host, the machine the tests run on) in a Redis list, and
Redis's clock as its code started; a run of its own message (with its dispatch's headers)
also the instant its begin counted its start at (its entry in the rate's log)."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Any

from celery import Task

from delayqueue import delayed_task
from delayqueue.engine.keys import limit_name, queue_keys
from delayqueue.wire import dispatch_headers
from tests.support.jobs import _client

RUNS = "test:limit_runs"
QUEUE = "limits"


_clients: dict[int, Any] = {}  # pid -> its client, connected before the runs it times


def _redis() -> Any:
    if os.getpid() not in _clients:
        _clients[os.getpid()] = _client()
    return _clients[os.getpid()]


def _run(kind: str, tag: str, seconds: float = 0.0, request: Any = None, task: str = "") -> None:
    client = _redis()
    redis_s, redis_us = client.time()  # Redis's clock as the task's code starts
    started = time.time()
    # The instant begin counted this start at (Redis's clock, ms): its entry in the rate's log.
    begun, dispatch = None, dispatch_headers(request)
    if dispatch is not None and task:
        log = queue_keys(dispatch[0]).limit_prefix + limit_name(task) + ":r"
        begun = client.zscore(log, f"{dispatch[1]}:{dispatch[2]}")
    if seconds:
        time.sleep(seconds)
    report = {
        "kind": kind, "tag": tag, "start": started, "end": time.time(), "pid": os.getpid(),
        "redis_start": int(redis_s) + int(redis_us) / 1e6, "begun_ms": begun,
    }  # fmt: skip
    client.rpush(RUNS, json.dumps(report))


@delayed_task(queue=QUEUE, rate="5/s", max_attempts=50, visibility_timeout=3, bind=True)
def rated(self: Task, tag: str) -> None:
    _run("rated", tag, request=self.request, task=self.name)


@delayed_task(queue=QUEUE, rate="5/s", batch=4, max_attempts=50, visibility_timeout=3)
def rated_batched(tag: str) -> None:
    _run("rated_batched", tag)


@delayed_task(queue=QUEUE, rate="2/s", batch=2, max_attempts=50, visibility_timeout=3)
def rated_slow_batched(tag: str) -> None:
    _run("rated_slow_batched", tag, 0.03)


@delayed_task(queue=QUEUE, rate="100/s", batch=4, max_attempts=50, visibility_timeout=3)
def rated_roomy_batched(tag: str) -> None:
    """A rate its batches stay far from: begun once per job (a horizon)."""
    _run("rated_roomy_batched", tag, 0.01)


@delayed_task(queue=QUEUE, concurrency=2, max_attempts=50, visibility_timeout=3)
def concurrent(tag: str, seconds: float) -> None:
    _run("concurrent", tag, seconds)


@delayed_task(queue=QUEUE, rate="4/s", concurrency=1, max_attempts=50, visibility_timeout=3)
def keyed(tag: str, seconds: float = 0.0) -> None:
    _run("keyed", tag, seconds)


@delayed_task(queue=QUEUE, expires=timedelta(seconds=30))
def expiring(tag: str) -> None:
    _run("expiring", tag)


@delayed_task(queue=QUEUE, max_attempts=5, backoff=1.0, expires=0.5)
def failing_expiring(tag: str) -> None:
    _run("failing_expiring", tag)
    raise ValueError(f"boom {tag}")


def runs(kind: str | None = None) -> list[dict[str, object]]:
    with _client() as client:
        found = [json.loads(raw) for raw in client.lrange(RUNS, 0, -1)]
    return [run for run in found if kind is None or run["kind"] == kind]


@delayed_task(queue="limits_sharded", shards=4, rate="3/s")
def sharded(tag: str) -> None:
    _run("sharded", tag)
