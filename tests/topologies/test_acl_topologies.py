"""Redis ACL users with exactly the command sets docs/redis-acl.md gives, on a Redis Cluster
and a Sentinel set of the test's own: the whole job cycle (enqueue, dedupe, reschedule,
cancel, a sharded queue's cancel by id over every shard, worker heartbeat and wake
subscription, reap + claim + dispatch, begin + ack and begin + fail, a batch, the metrics'
gauges), with and without durable writes (WAIT), and no refusal in any node's ACL LOG.
tests/topologies/test_connections.py does the same for a single server over TLS."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

import delayqueue
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import DelayQueueError
from delayqueue.observability.metrics import QueueCollector
from delayqueue.runner.batches import run_batch
from delayqueue.runner.job import run_job
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.redis_server import ACL_COMMANDS
from tests.support.topologies import MASTER_NAME, ClusterSet, SentinelSet

DOC = Path(__file__).resolve().parents[2] / "docs" / "redis-acl.md"
PASSWORD = "acl-pw-1"
SENTINEL_PASSWORD = "acl-pw-2"

# What docs/redis-acl.md adds to ACL_COMMANDS (the single-server set) for each topology.
CLUSTER_COMMANDS = "+cluster|slots +command +asking"
DURABLE_COMMANDS = "+wait"
SENTINEL_COMMANDS = "+sentinel|masters"  # on the sentinels, for their own user


def acl_setuser(client: redis.Redis, user: str, *rules: str) -> None:
    client.execute_command("ACL", "SETUSER", user, "reset", "on", *rules)


def data_user(client: redis.Redis, user: str, *extra: str) -> None:
    """A user on delayqueue's keys and channels with the single-server set plus ``extra``."""
    rules = [f">{PASSWORD}", "~dq:*", "&dq:*", *ACL_COMMANDS.split()]
    acl_setuser(client, user, *rules, *(c for e in extra for c in e.split()))


def refusals(client: redis.Redis) -> list[Any]:
    return list(client.execute_command("ACL", "LOG"))


def run_the_cycle(parked_celery: Celery, *, durable: bool) -> None:
    """Everything a project's processes do with their Redis user: the client API, a delay
    worker pass, the Celery side (single and batched), the metrics gauges."""
    job = jobs.record.delay_for("acl", seconds=30, key="k-acl", on_commit=False, durable=durable)
    again = jobs.record.delay_for("acl", seconds=30, key="k-acl", on_commit=False)
    assert (again.id, again.outcome) == (job.id, "kept")
    assert jobs.record.reschedule(key="k-acl", seconds=60, durable=durable) is not None
    assert jobs.record.cancel(key="k-acl", durable=durable) is True
    made = jobs.sharded.delay_many([(i,) for i in range(8)], seconds=30, durable=durable)
    assert delayqueue.cancel("sharded", made[0].id, durable=durable) is True  # every shard
    assert delayqueue.reschedule("sharded", made[1].id, delay=0, durable=durable) is not None

    ok = jobs.record.delay_for("ok", seconds=0, on_commit=False, durable=durable)
    bad = jobs.record.delay_for("bad", seconds=0, on_commit=False, durable=durable)
    batched = [jobs.unbatched.delay_for(f"b{i}", seconds=0, on_commit=False) for i in range(3)]
    worker = DelayWorker(["tests", "sharded"], visibility_timeout=60, celery_app=parked_celery)
    worker._heartbeat()  # heartbeat hash, workers zset, wake channel subscriptions
    claimed = {j.id: j for j in worker.run_pass().claimed}  # reap + claim + dispatch
    assert {ok.id, bad.id, made[1].id, *(b.id for b in batched)} <= set(claimed)

    assert run_job(lambda: "done", [], {}, ("tests", ok.id, claimed[ok.id].token)) == "done"

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        run_job(boom, [], {}, ("tests", bad.id, claimed[bad.id].token), backoff=0)
    entries: list[list[Any]] = [[b.id, claimed[b.id].token, [], {}, None] for b in batched]
    assert run_batch(lambda job: None, "tests", jobs.unbatched.name, entries) == 3

    families = {family.name: family for family in QueueCollector().collect()}
    assert families["delayqueue_redis_up"].samples[0].value == 1
    worker._goodbye()


# ---- Redis Cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(cluster_set: ClusterSet) -> ClusterSet:
    """The module's cluster (3 masters, 3 replicas); on every node (replicas too: ACL users
    are not replicated, and a promoted replica needs them) a user without WAIT and one with."""
    for port in cluster_set.ports:
        with cluster_set.server_on(port).client() as node:
            data_user(node, "dq", CLUSTER_COMMANDS)
            data_user(node, "dq-durable", CLUSTER_COMMANDS, DURABLE_COMMANDS)
    return cluster_set


def point_at_cluster(
    topology: ClusterSet, settings: Any, user: str, *, node: int | None = None, **extra: Any
) -> None:
    """DELAYQUEUE on the cluster (emptied, its ACL LOGs too) as ``user``, through ``node``
    (a port; default: the first master)."""
    topology.flush()
    for server in topology.servers:
        if server.process is not None:
            with server.client() as client:
                client.execute_command("ACL", "LOG", "RESET")
    port = node or topology.masters()[0][0]
    settings.DELAYQUEUE = {
        **settings.DELAYQUEUE,
        "REDIS_URL": f"redis://{user}:{PASSWORD}@127.0.0.1:{port}/0",
        "REDIS_CLUSTER": True,
        "SOCKET_TIMEOUT": 2.0,
        **extra,
    }


def cluster_refusals(topology: ClusterSet) -> dict[int, list[Any]]:
    """ACL LOG of every node still running, those that recorded a refusal."""
    found = {}
    for server in topology.servers:
        if server.process is not None:
            with server.client() as node:
                found[server.port] = refusals(node)
    return {port: entries for port, entries in found.items() if entries}


def test_on_a_cluster_the_documented_set_runs_the_whole_cycle(
    cluster: ClusterSet, settings: Any, parked_celery: Celery
) -> None:
    point_at_cluster(cluster, settings, "dq")
    run_the_cycle(parked_celery, durable=False)
    assert cluster_refusals(cluster) == {}


def test_on_a_cluster_durable_writes_need_wait_and_nothing_more(
    cluster: ClusterSet, settings: Any, parked_celery: Celery
) -> None:
    point_at_cluster(cluster, settings, "dq-durable", DURABLE=True)
    run_the_cycle(parked_celery, durable=True)  # the worker's own writes wait too (DURABLE)
    assert cluster_refusals(cluster) == {}


def test_on_a_cluster_the_set_covers_a_slot_moved_to_another_master(
    cluster: ClusterSet, settings: Any
) -> None:
    """Half way through moving a queue's slot (its keys migrated, the slot not handed over
    yet) the old master answers ASK and the client sends ASKING to the new one: the gauges'
    one-key reads are answered; a script, whose keys are not all there, gets TRYAGAIN until
    the hand-over. After it, the old master answers MOVED."""
    point_at_cluster(cluster, settings, "dq")
    job = jobs.record.delay_for("moving", seconds=60, on_commit=False)
    key = queue_keys("tests").scheduled
    source = cluster.master_of(key)
    target = next(cluster.server_on(p) for p, _ in cluster.masters() if p != source.port)
    with source.client() as src, target.client() as dst:
        slot = src.execute_command("CLUSTER", "KEYSLOT", key)
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.node_ids[source.port])
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.node_ids[target.port])
        keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        scheduled = next(f for f in QueueCollector().collect() if f.name.endswith("_scheduled"))
        assert {s.labels["queue"]: s.value for s in scheduled.samples} == {"tests": 1}
        with pytest.raises(DelayQueueError, match="TTL exhausted"):
            jobs.record.reschedule(job.id, seconds=30)
        masters = [target.port, source.port, *(p for p, _ in cluster.masters())]
        for port in dict.fromkeys(masters):  # the new owner first, then the old one
            with cluster.server_on(port).client() as node:
                node.execute_command(
                    "CLUSTER", "SETSLOT", slot, "NODE", cluster.node_ids[target.port]
                )
    assert jobs.record.reschedule(job.id, seconds=30) is not None  # MOVED
    assert cluster.master_of(key).port == target.port
    assert cluster_refusals(cluster) == {}


def test_on_a_cluster_the_client_follows_a_failover_with_the_same_set(
    cluster: ClusterSet, settings: Any, parked_celery: Celery
) -> None:
    """After a failover the client learns the slot map again (CLUSTER SLOTS) from the nodes
    left, and writes to the promoted replica as the same user."""
    victim = cluster.master_of(queue_keys("tests").scheduled).port
    # REDIS_URL names a node that stays: a client made after the kill learns the cluster
    # from that one node (clients.cluster_client), and the delay worker makes its
    # bytes-reading client at its first pass
    stays = next(s.port for s in cluster.servers if s.port != victim)
    point_at_cluster(cluster, settings, "dq-durable", node=stays)
    before = jobs.record.delay_for("before", seconds=60, on_commit=False, durable=True)
    cluster.kill_master(victim)
    after = jobs.record.delay_for("after", seconds=60, on_commit=False, durable=False)
    worker = DelayWorker(["tests"], celery_app=parked_celery)
    worker.run_pass()
    assert jobs.record.cancel(before.id) is True and jobs.record.cancel(after.id) is True
    assert cluster_refusals(cluster) == {}


# ---- Redis Sentinel -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelSet]:
    """A master, a replica and 3 sentinels that require a password; the data users on the
    master and the replica, delayqueue's own user on every sentinel."""
    topology = SentinelSet(sentinel_password=SENTINEL_PASSWORD).start()
    try:
        for server in topology.servers:
            with server.client() as node:
                data_user(node, "dq", DURABLE_COMMANDS)
        for sentinel in topology.sentinels:
            with sentinel.client() as on_sentinel:
                acl_setuser(on_sentinel, "dq-sentinel", f">{PASSWORD}", SENTINEL_COMMANDS)
        yield topology
    finally:
        topology.cleanup()


def test_on_sentinel_the_documented_sets_run_the_whole_cycle_durably(
    sentinels: SentinelSet, settings: Any, parked_celery: Celery
) -> None:
    with sentinels.master_client() as master:
        master.flushall()
    nodes = [s.client() for s in sentinels.servers] + [s.client() for s in sentinels.sentinels]
    for node in nodes:
        node.execute_command("ACL", "LOG", "RESET")
    first, rest = sentinels.url.split(";", 1)
    settings.DELAYQUEUE = {
        **settings.DELAYQUEUE,
        "REDIS_URL": first.replace("sentinel://", f"sentinel://dq:{PASSWORD}@") + ";" + rest,
        "SENTINEL_MASTER": MASTER_NAME,
        "SENTINEL_KWARGS": {"username": "dq-sentinel", "password": PASSWORD},
        "DURABLE": True,
    }
    run_the_cycle(parked_celery, durable=True)
    try:
        assert {i: refusals(n) for i, n in enumerate(nodes) if refusals(n)} == {}
    finally:
        for node in nodes:
            node.close()


# ---- the documentation --------------------------------------------------------------------


def test_the_documented_sets_are_the_tested_ones() -> None:
    text = DOC.read_text()
    commands = set(re.findall(r"[+][a-z|-]+", " ".join(re.findall(r"```\n(.*?)```", text, re.S))))
    for tested in (ACL_COMMANDS, CLUSTER_COMMANDS, DURABLE_COMMANDS, SENTINEL_COMMANDS):
        assert set(tested.split()) <= commands, set(tested.split()) - commands
