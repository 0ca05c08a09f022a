"""Tasks the tests schedule. They report each run in a Redis list the tests read."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from celery import shared_task

from delayqueue import delayed_task
from delayqueue.engine.clients import ClusterClient
from delayqueue.wire import dispatch_headers

RAN = "test:ran"


def _client() -> redis.Redis:
    """delayqueue's Redis, whatever its topology (tests/settings.py: DQ_TEST_TOPOLOGY)."""
    if os.environ.get("REDIS_CLUSTER") == "true":
        return ClusterClient.from_url(os.environ["REDIS_URL"])  # type: ignore[return-value]
    return redis.Redis.from_url(os.environ["REDIS_URL"])


def _report(kind: str, tag: str, request: Any = None) -> None:
    """A run of ``kind`` with ``tag``: when it ran, in which process, and (given the Celery
    ``request``) the job it ran, or None outside a dispatch."""
    dispatch = dispatch_headers(request) if request is not None else None
    with _client() as client:
        report = {"kind": kind, "tag": tag, "at": time.time(), "pid": os.getpid(),
                  "job": dispatch[1] if dispatch else None}  # fmt: skip
        client.rpush(RAN, json.dumps(report))


@delayed_task(queue="tests", max_attempts=3, backoff=0.05)
def record(tag: str) -> str:
    _report("record", tag, record.request)
    return tag


@delayed_task(queue="tests", max_attempts=3, backoff=0.05)
def always_fails(tag: str) -> None:
    _report("fail", tag)
    raise ValueError(f"boom {tag}")


@delayed_task(queue="tests", visibility_timeout=2)
def slow(tag: str, seconds: float) -> None:
    time.sleep(seconds)
    _report("slow", tag)


@delayed_task(queue="tests", max_attempts=3, backoff=0.05, batch=5)
def batched(tag: str) -> str:
    """Handed to Celery 5 jobs to a message; a tag starting with "fail" raises."""
    _report("batched", tag)
    if tag.startswith("fail"):
        raise ValueError(f"boom {tag}")
    return tag


@delayed_task(queue="tests", batch=1)
def unbatched(tag: str) -> None:
    _report("unbatched", tag)


@delayed_task(queue="tests", time_limit=60)
def limited(tag: str) -> None:
    _report("limited", tag)


@delayed_task(queue="tests", batch=10, bind=True)
def deadline_probe(self: object, tag: str, seconds: float) -> None:
    """Reports how long its job has left in flight before it is reaped, then sleeps."""
    _report_deadline(self, tag, seconds)


def _report_deadline(self: object, tag: str, seconds: float) -> None:
    from delayqueue.engine.keys import queue_keys

    client = _client()
    job_id = self.request.dq_id  # type: ignore[attr-defined]
    score = client.zscore(queue_keys("tests").inflight, job_id)
    _report("deadline", f"{tag} {(score or 0) / 1000 - time.time():.3f}")
    time.sleep(seconds)


@delayed_task(queue="tests", batch=1, bind=True)
def single_deadline_probe(self: object, tag: str, seconds: float) -> None:
    """deadline_probe's report, for a job handed over one to a message."""
    _report_deadline(self, tag, seconds)


@shared_task(name="tests.support.jobs.plain")
def plain(tag: str) -> None:
    """A Celery task not made by @delayed_task: scheduled with delayqueue.enqueue()."""
    _report("plain", tag)


def ran(kind: str | None = None) -> list[dict[str, object]]:
    with _client() as client:
        runs = [json.loads(item) for item in client.lrange(RAN, 0, -1)]
    return [run for run in runs if kind is None or run["kind"] == kind]


@delayed_task(queue="tests", durable=True)
def durable_record(tag: str) -> None:
    """Its jobs' writes wait for a replica (Redis WAIT)."""
    _report("durable", tag)


@delayed_task(queue="sharded", shards=4)
def sharded(tag: str) -> None:
    """Its queue is 4 queues, sharded~0 .. sharded~3 (engine/shards.py)."""
    _report("sharded", tag)


@delayed_task(queue="tests")
def occurrence(tag: str) -> None:
    """Reports the id of the job it runs as (a periodic schedule's occurrence)."""
    from celery import current_task

    from delayqueue.wire import dispatch_headers

    dispatch = dispatch_headers(current_task.request)
    _report("occurrence", f"{tag}:{dispatch[1] if dispatch else '?'}")
