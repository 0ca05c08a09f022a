"""Limited tasks the tests schedule (docs/limits.md). Each run reports its start and end
(time.time() of the Celery worker's host, the machine the tests run on) in a Redis list."""

from __future__ import annotations

import json
import os
import time
from datetime import timedelta
from typing import Any

from celery import Task

from delayqueue import delayed_task
from delayqueue.wire import HEADER_CLAIMED, HEADER_DUE, header_ms
from tests.support.jobs import _client

RUNS = "test:limit_runs"
QUEUE = "limits"


def _run(kind: str, tag: str, seconds: float = 0.0, request: Any = None) -> None:
    started = time.time()
    if seconds:
        time.sleep(seconds)
    # the instant the claim counted the start at (Redis's clock): its due time when claimed
    # ahead of it, else the claim's (a batch's jobs carry theirs in the batch, not here)
    claimed, due = header_ms(request, HEADER_CLAIMED), header_ms(request, HEADER_DUE)
    counted = max(claimed, due or 0) if claimed is not None else None
    with _client() as client:
        report = {
            "kind": kind, "tag": tag, "start": started, "end": time.time(), "pid": os.getpid(),
            "counted_ms": counted,
        }  # fmt: skip
        client.rpush(RUNS, json.dumps(report))


@delayed_task(queue=QUEUE, rate="5/s", max_attempts=50, visibility_timeout=3, bind=True)
def rated(self: Task, tag: str) -> None:
    _run("rated", tag, request=self.request)


@delayed_task(queue=QUEUE, rate="5/s", batch=4, max_attempts=50, visibility_timeout=3)
def rated_batched(tag: str) -> None:
    _run("rated_batched", tag)


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
