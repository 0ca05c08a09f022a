"""delayqueue's Redis as the tests see it, wherever ``DQ_TEST_TOPOLOGY`` (tests/settings.py)
put it: a client, the flush between tests, INFO and command counts over every primary, and
the mark that skips a test on the other topologies."""

from __future__ import annotations

import os
from typing import Any, cast

import pytest
import redis
from redis.cluster import RedisCluster

from delayqueue.engine.clients import ClusterClient

TOPOLOGY = os.environ.get("DQ_TEST_TOPOLOGY", "single")


def delayqueue_redis() -> redis.Redis:
    """A client of delayqueue's data wherever DQ_TEST_TOPOLOGY put it: the single server,
    the Sentinel set's master, or the cluster (a RedisCluster, typed as the others)."""
    if TOPOLOGY == "cluster":
        cluster = ClusterClient.from_url(
            os.environ["REDIS_URL"], decode_responses=True, socket_timeout=10
        )
        return cast(redis.Redis, cluster)
    return redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True, socket_timeout=10)


def flush(client: redis.Redis) -> None:
    """Empty delayqueue's data: only on servers the suite started (their run ids)."""
    ours = set(os.environ["DQ_TEST_RUN_IDS"].split(","))
    if isinstance(client, RedisCluster):
        nodes = client.get_primaries()
        run_ids = client.info("server", target_nodes=nodes)
        if any(info["run_id"] not in ours for info in run_ids.values()):
            raise RuntimeError("refusing to flush a Redis the test suite did not start")
        client.flushdb(target_nodes=nodes)
        return
    if client.info("server")["run_id"] not in ours:
        raise RuntimeError("refusing to flush a Redis the test suite did not start")
    client.flushdb()


def info_everywhere(client: redis.Redis, section: str) -> list[dict[str, Any]]:
    """INFO ``section`` of delayqueue's server, or of every primary of the cluster."""
    if isinstance(client, RedisCluster):
        return list(client.info(section, target_nodes=client.get_primaries()).values())
    return [client.info(section)]


def command_calls(client: redis.Redis, *commands: str) -> int:
    """How many times delayqueue's server (or every cluster primary) ran these commands."""
    return sum(
        int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))
        for stats in info_everywhere(client, "commandstats")
        for command in commands
    )


def only_on(*topologies: str) -> pytest.MarkDecorator:
    """Skip a test on the other topologies (it sets up a Redis of its own, say)."""
    return pytest.mark.skipif(
        TOPOLOGY not in topologies, reason=f"needs the {' or '.join(topologies)} topology"
    )


def reload_scripts(client: redis.Redis) -> None:
    """Load again every script a test flushed (``SCRIPT FLUSH``): the processes that outlive
    it (a session's Celery worker) reload a script as they find it missing, one call at a
    time, and a pipeline whose first script was not reloaded yet while its second was runs
    out of order (docs/design.md, "Scripts in a pipeline keep their order"). One
    ``SCRIPT EXISTS`` when none is missing."""
    from delayqueue.engine.execution import get_scripts

    scripts = get_scripts()
    every = [value for value in vars(scripts).values() if hasattr(value, "sha")]
    if isinstance(client, RedisCluster) or all(client.script_exists(*(s.sha for s in every))):
        return
    for script in every:
        client.script_load(script.script)
