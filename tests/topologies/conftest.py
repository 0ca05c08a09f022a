"""The topologies of tests/support/topologies.py as fixtures: each test module that asks for
one gets a Redis Cluster or a Sentinel set of its own, stopped after its last test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
