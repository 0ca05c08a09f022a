"""delayqueue on a Redis Cluster of the tests' own (tests/support/topologies.py): pointing
it there, finding a queue on each master, reading what one node itself holds."""

from __future__ import annotations

from typing import Any

from delayqueue.engine import clients
from delayqueue.engine.keys import queue_keys
from tests.support.topologies import ClusterSet

SOCKET_TIMEOUT = 2.0


def point_delayqueue_at(cluster_set: ClusterSet, settings: Any) -> clients.ClusterClient:
    """DELAYQUEUE on the cluster (emptied first); a cluster client of the test's own to look
    at it (the caller closes it)."""
    cluster_set.flush()
    settings.DELAYQUEUE = {
        **settings.DELAYQUEUE,
        "REDIS_URL": cluster_set.url,
        "REDIS_CLUSTER": True,
        "SOCKET_TIMEOUT": SOCKET_TIMEOUT,
    }
    return clients.ClusterClient(startup_nodes=cluster_set.startup_nodes, decode_responses=True)


def queues_on_every_master(cluster_set: ClusterSet) -> dict[int, str]:
    """master port -> a queue name whose keys that master holds."""
    found: dict[int, str] = {}
    for i in range(200):
        name = f"q{i}"
        found.setdefault(cluster_set.master_of(queue_keys(name).scheduled).port, name)
        if len(found) == len(cluster_set.masters()):
            return found
    raise AssertionError("no queue name for some master")


def scheduled_on(cluster_set: ClusterSet, port: int, queue: str) -> list[str]:
    """The ids a node itself holds in a queue's schedule (a plain client: no redirects)."""
    with cluster_set.server_on(port).client() as node:
        return list(node.zrange(queue_keys(queue).scheduled, 0, -1))
