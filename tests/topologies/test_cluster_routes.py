"""The routes of ``delay_for`` on a Redis Cluster (engine/cluster_direct.py): a call finds
its master by its first key, the same string on every call of a queue, so the hash tag is
read from a key once, not on every call; a job's own key, first in the Celery side's calls,
is not remembered; and the routes stay bounded. Real cluster (tests/support/topologies.py)."""

from __future__ import annotations

from typing import Any

import pytest

import delayqueue
from delayqueue.engine import clients, cluster_direct, transitions
from delayqueue.engine.execution import run_direct
from delayqueue.engine.keys import queue_keys
from tests.support import jobs
from tests.support.on_cluster import queues_on_every_master, scheduled_on
from tests.support.topologies import ClusterSet


def schedule(queue: str, tag: object) -> str:
    return delayqueue.enqueue(jobs.record, (tag,), queue=queue, delay=60, on_commit=False).id


def routed_port(queue: str) -> int | None:
    name = cluster_direct.connections().routed(queue_keys(queue).scheduled)
    return None if name is None else int(name.rsplit(":", 1)[1])


def test_a_queues_hash_tag_is_read_once_not_on_every_call(
    cluster: clients.ClusterClient, cluster_set: ClusterSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[Any] = []
    tag = cluster_direct._tag

    def counted(key: Any) -> Any:
        read.append(key)
        return tag(key)

    monkeypatch.setattr(cluster_direct, "_tag", counted)
    for port, queue in queues_on_every_master(cluster_set).items():
        read.clear()
        made = [schedule(queue, 0)]
        assert set(read) == {queue_keys(queue).scheduled}  # the route found
        read.clear()
        made += [schedule(queue, i) for i in range(1, 5)]
        assert read == []  # and the next calls' route looked up by their first key
        assert sorted(scheduled_on(cluster_set, port, queue)) == sorted(made)
        assert routed_port(queue) == port


def test_routes_are_forgotten_past_their_bound_and_found_again(
    cluster: clients.ClusterClient, cluster_set: ClusterSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_direct, "ROUTES", 2)
    by_master = queues_on_every_master(cluster_set)
    made: dict[int, list[str]] = {port: [] for port in by_master}
    for _round in range(2):
        for port, queue in by_master.items():  # 3 queues: more than the routes hold
            made[port].append(schedule(queue, port))
            assert routed_port(queue) == port
    first = next(iter(by_master.values()))
    assert routed_port(first) is None  # forgotten when the third queue's route was added
    for port, queue in by_master.items():
        assert sorted(scheduled_on(cluster_set, port, queue)) == sorted(made[port])


def test_a_jobs_own_key_first_in_a_call_is_not_remembered(
    cluster: clients.ClusterClient, cluster_set: ClusterSet
) -> None:
    port, queue = next(iter(queues_on_every_master(cluster_set).items()))
    keys = queue_keys(queue)
    made = [schedule(queue, i) for i in range(3)]
    routes = cluster_direct.connections()
    remembered = (len(routes._routes), len(routes._by_key))
    for job_id in made:  # ack's first key is the job's (here no job is in flight)
        assert run_direct(transitions.ack(keys, job_id, "no-such-token")) is False
        assert routes.routed(keys.job(job_id)) == f"127.0.0.1:{port}"
    assert (len(routes._routes), len(routes._by_key)) == remembered
    assert sorted(scheduled_on(cluster_set, port, queue)) == sorted(made)
