"""The topologies of tests/support/topologies.py as fixtures: each test module that asks for
one gets a Redis Cluster or a Sentinel set of its own, stopped after its last test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from delayqueue.engine.clients import ClusterClient
from tests.support.on_cluster import point_delayqueue_at
from tests.support.topologies import ClusterSet, SentinelSet


@pytest.fixture(scope="module")
def cluster_set() -> Iterator[ClusterSet]:
    """A Redis Cluster: 3 masters, 3 replicas."""
    topology = ClusterSet().start()
    try:
        yield topology
    finally:
        topology.cleanup()


@pytest.fixture(scope="module")
def sentinel_set() -> Iterator[SentinelSet]:
    """A Sentinel set: a master, a replica and 3 sentinels."""
    topology = SentinelSet().start()
    try:
        yield topology
    finally:
        topology.cleanup()


@pytest.fixture
def cluster(cluster_set: ClusterSet, settings: Any) -> Iterator[ClusterClient]:
    """delayqueue on the module's cluster (emptied first); a cluster client of the test's own
    to look at it."""
    client = point_delayqueue_at(cluster_set, settings)
    yield client
    client.close()
