"""Tasks of the Celery set-up tests: each run appends its tag to a Redis list. Nothing here
imports delayqueue's own Celery tasks: an app that lists this module must still run every
job, batched or not."""

from __future__ import annotations

import os

import redis
from celery import shared_task

from delayqueue import delayed_task
from delayqueue.engine.clients import ClusterClient

RAN = "test:setups:ran"


def report(tag: str) -> None:
    url = os.environ["REDIS_URL"]
    client = (
        ClusterClient.from_url(url) if os.environ.get("REDIS_CLUSTER") == "true" else None
    ) or redis.Redis.from_url(url)
    with client:
        client.rpush(RAN, tag)


@delayed_task(queue="setups", max_attempts=3, backoff=0.05)
def burst(tag: str) -> None:
    report(tag)


@delayed_task(queue="setups", name="setups.named_burst", max_attempts=3, backoff=0.05)
def named_burst(tag: str) -> None:
    """Named explicitly: the same task whatever name its module is imported under."""
    report(tag)


@shared_task(name="setups.plain")
def plain(tag: str) -> None:
    """A plain Celery task, scheduled with ``delayqueue.enqueue``."""
    report(tag)
