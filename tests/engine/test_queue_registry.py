"""Odd but valid queue registries: a queue and a shard name of it side by side (``orders`` and
``orders~0``: the public API accepts ``~N`` for a queue without shards, and it is the normal
state while sharding is turned on for a queue with jobs). The admin, the command line and
the metrics show both; none answers 500 or exits 1."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis
from django.test import Client

import delayqueue
from delayqueue.engine.keys import global_keys
from tests.support import jobs
from tests.support.admin_pages import text, url
from tests.support.command_line import cli

pytestmark = pytest.mark.django_db


@pytest.fixture
def base_and_shard(r: redis.Redis) -> None:
    delayqueue.enqueue(jobs.record, ["base"], queue="orders", delay=600, on_commit=False)
    delayqueue.enqueue(jobs.record, ["s0"], queue="orders~0", delay=600, on_commit=False)
    delayqueue.enqueue(jobs.record, ["s3"], queue="orders~3", delay=600, on_commit=False)
    assert {"orders", "orders~0", "orders~3"} <= set(r.smembers(global_keys().queues))


def test_the_dashboard_and_its_pages_show_a_queue_beside_its_shard_names(
    base_and_shard: None, admin_client: Client
) -> None:
    page = admin_client.get(url("changelist"))
    assert page.status_code == 200
    assert "orders~0" in text(page) and "orders~3" in text(page)
    for queue in ("orders", "orders~0", "orders~3"):
        listed = admin_client.get(url("list", queue, "scheduled"))
        assert listed.status_code == 200, queue


def test_status_shows_a_queue_beside_its_shard_names(base_and_shard: None) -> None:
    shown = cli("status", "--json")
    assert shown.returncode == 0, shown.stderr
    queues: dict[str, Any] = {q["name"]: q for q in json.loads(shown.stdout)["queues"]}
    assert queues["orders"]["scheduled"] == 3  # the queue's own job and its shards'
    table = cli("status")
    assert table.returncode == 0, table.stderr
    assert "orders" in table.stdout and "Traceback" not in table.stderr
    health = cli("health")
    assert "Traceback" not in health.stderr and "Traceback" not in health.stdout


def test_metrics_count_a_queue_beside_its_shard_names(base_and_shard: None) -> None:
    from prometheus_client import generate_latest

    from delayqueue.observability.metrics import registry

    body = generate_latest(registry()).decode()
    assert 'queue="orders~0"' in body and 'queue="orders"' in body
