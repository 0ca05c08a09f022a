"""Tasks the tests schedule. They report each run in a Redis list the tests read."""

from __future__ import annotations

import json
import os
import time

import redis
from celery import shared_task

from delayqueue import delayed_task

RAN = "test:ran"


def _report(kind: str, tag: str) -> None:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    client.rpush(RAN, json.dumps({"kind": kind, "tag": tag, "at": time.time(), "pid": os.getpid()}))


@delayed_task(queue="tests", max_attempts=3, backoff=0.05)
def record(tag: str) -> str:
    _report("record", tag)
    return tag


@delayed_task(queue="tests", max_attempts=3, backoff=0.05)
def always_fails(tag: str) -> None:
    _report("fail", tag)
    raise ValueError(f"boom {tag}")


@delayed_task(queue="tests", visibility_timeout=2)
def slow(tag: str, seconds: float) -> None:
    time.sleep(seconds)
    _report("slow", tag)


@shared_task(name="tests.jobs.plain")
def plain(tag: str) -> None:
    """A Celery task not made by @delayed_task: scheduled with delayqueue.enqueue()."""
    _report("plain", tag)


def ran(kind: str | None = None) -> list[dict[str, object]]:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    runs = [json.loads(item) for item in client.lrange(RAN, 0, -1)]
    return [run for run in runs if kind is None or run["kind"] == kind]
