"""``delay_for`` on a Redis Cluster goes straight to the master of its queue's slot, on a
connection of its own (engine/cluster_direct.py), and stays correct while the cluster changes
under it: a resharding that migrates the queue's slot to another master (TRYAGAIN while the
keys move, MOVED after), and a master's failover. Real clusters of redis-servers
(tests/support/topologies.py), nothing mocked; every call's job is looked for on the nodes
themselves."""

from __future__ import annotations

import threading
import time
from typing import Any

import delayqueue
from delayqueue.engine import clients, cluster_direct
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import DelayQueueError, RedisUnavailable
from tests.support import jobs
from tests.support.on_cluster import (
    SOCKET_TIMEOUT,
    point_delayqueue_at,
    queues_on_every_master,
    scheduled_on,
)
from tests.support.stored import stored_job
from tests.support.topologies import ClusterSet


def jobs_on(cluster_set: ClusterSet, port: int, queue: str, ids: list[str]) -> int:
    """How many of ``ids`` have their job's data (hash or packed spec) on the node on
    ``port``."""
    keys = queue_keys(queue)
    with cluster_set.server_on(port).client() as node:
        return sum(1 for i in ids if stored_job(node, keys, i))


def routed_port(queue: str) -> int | None:
    """The port of the master delay_for on ``queue`` now goes straight to."""
    name = cluster_direct.connections().routed(queue_keys(queue).scheduled)
    return None if name is None else int(name.rsplit(":", 1)[1])


def schedule(queue: str, tag: object) -> str:
    return delayqueue.enqueue(jobs.record, (tag,), queue=queue, delay=60, on_commit=False).id


def error_counts(cluster_set: ClusterSet, port: int) -> dict[str, int]:
    """The error replies a node has given, by code (``INFO errorstats``)."""
    with cluster_set.server_on(port).client() as node:
        stats = node.info("errorstats")
    return {k.removeprefix("errorstat_"): int(v["count"]) for k, v in stats.items()}


def test_delay_for_goes_straight_to_the_master_of_its_queues_slot(
    cluster: clients.ClusterClient, cluster_set: ClusterSet
) -> None:
    by_master = queues_on_every_master(cluster_set)
    made = {port: [schedule(queue, i) for i in range(3)] for port, queue in by_master.items()}
    for port, queue in by_master.items():
        assert sorted(scheduled_on(cluster_set, port, queue)) == sorted(made[port])
        assert jobs_on(cluster_set, port, queue, made[port]) == 3
        assert routed_port(queue) == port  # a connection of its own to that master
    # a sharded queue: each shard (its own hash tag) on the master of its slot
    for job in jobs.sharded.delay_many([(i,) for i in range(12)], seconds=60, on_commit=False):
        on = cluster_set.master_of(queue_keys(job.queue).scheduled).port
        assert job.id in scheduled_on(cluster_set, on, job.queue)


# ---- a resharding ---------------------------------------------------------------------------


class Resharding:
    """One slot moved from a master to another as ``redis-cli --cluster reshard`` moves it:
    IMPORTING on the target, MIGRATING on the source, every key MIGRATEd, then the slot
    given to the target on every master."""

    def __init__(self, cluster_set: ClusterSet, slot: int, source: int, target: int) -> None:
        self.cluster_set, self.slot, self.source, self.target = cluster_set, slot, source, target

    def _on(self, port: int, *args: object) -> Any:
        with self.cluster_set.server_on(port).client() as node:
            return node.execute_command(*args)

    def start(self) -> None:
        ids = self.cluster_set.node_ids
        self._on(self.target, "CLUSTER", "SETSLOT", self.slot, "IMPORTING", ids[self.source])
        self._on(self.source, "CLUSTER", "SETSLOT", self.slot, "MIGRATING", ids[self.target])

    def move_keys(self) -> int:
        moved = 0
        while keys := self._on(self.source, "CLUSTER", "GETKEYSINSLOT", self.slot, 10):
            self._on(self.source, "MIGRATE", "127.0.0.1", self.target, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
        return moved

    def finish(self) -> None:
        target_id = self.cluster_set.node_ids[self.target]
        ports = [self.target, self.source]
        ports += [p for p, _id in self.cluster_set.masters() if p not in ports]
        for port in ports:
            self._on(port, "CLUSTER", "SETSLOT", self.slot, "NODE", target_id)


def test_a_resharding_moves_the_queue_and_every_call_follows_it(
    cluster: clients.ClusterClient, cluster_set: ClusterSet
) -> None:
    """Calls keep coming while the queue's slot migrates: through the migration (a script
    whose keys are on two nodes gets TRYAGAIN, which redis-py's client waits out) and after
    it (the old master answers MOVED). Each call that returned has its job on the new master,
    once; a call that failed (RedisUnavailable: TRYAGAIN for too long) wrote nothing; and the
    direct path learns the new master."""
    by_master = queues_on_every_master(cluster_set)
    (source, queue), (target, _) = list(by_master.items())[:2]
    before = [schedule(queue, i) for i in range(30)]
    assert routed_port(queue) == source
    errors_before = error_counts(cluster_set, source)

    made: list[str] = []
    failed: list[DelayQueueError] = []
    finished = threading.Event()
    after_finish: list[str] = []

    def keep_calling() -> None:
        deadline = time.monotonic() + 30
        while len(after_finish) < 50 and time.monotonic() < deadline:
            done = finished.is_set()
            try:
                job_id = schedule(queue, "during")
            except DelayQueueError as exc:
                failed.append(exc)
                continue
            made.append(job_id)
            if done:
                after_finish.append(job_id)

    caller = threading.Thread(target=keep_calling, daemon=True)
    resharding = Resharding(cluster_set, cluster.keyslot(queue_keys(queue).scheduled), source,
                            target)  # fmt: skip
    caller.start()
    try:
        time.sleep(0.1)
        resharding.start()
        time.sleep(0.2)  # calls meet the slot MIGRATING with its keys still here: TRYAGAIN
        assert resharding.move_keys() >= 31  # the jobs and the schedule
        resharding.finish()
        finished.set()
    finally:
        finished.set()
        caller.join(60)
    assert not caller.is_alive() and len(after_finish) == 50, failed[-1:]

    assert all(isinstance(exc, RedisUnavailable) for exc in failed), failed[:3]
    on_target = scheduled_on(cluster_set, target, queue)
    assert sorted(on_target) == sorted(before + made)  # nothing lost, nothing unannounced
    assert len(set(before + made)) == len(before + made)
    assert jobs_on(cluster_set, target, queue, before + made) == len(before + made)
    with cluster_set.server_on(source).client() as node:  # (it answers MOVED for them now)
        assert node.execute_command("CLUSTER", "COUNTKEYSINSLOT", resharding.slot) == 0
    errors = error_counts(cluster_set, source)
    assert errors.get("MOVED", 0) > errors_before.get("MOVED", 0)
    assert errors.get("TRYAGAIN", 0) > errors_before.get("TRYAGAIN", 0)
    assert routed_port(queue) == target  # the next calls go straight to the new master
    job_id = schedule(queue, "last")
    assert job_id in scheduled_on(cluster_set, target, queue)


# ---- a failover -----------------------------------------------------------------------------


def test_a_failover_loses_no_acknowledged_job_and_the_direct_path_finds_the_new_master(
    settings: Any,
) -> None:
    """Calls keep coming while a master is SIGKILLed and its replica takes over. Every call
    returns a job or raises RedisUnavailable. The jobs written before the kill (a WAIT saw
    the replica have them) and after the failover are on the new master, and no job is
    there that a caller was not told of. (A job a caller was told of in the instant before
    the kill may be lost with the master: replication is asynchronous; DURABLE closes that
    window, docs/topologies.md.)"""
    with ClusterSet() as cluster_set:
        point_delayqueue_at(cluster_set, settings)
        queue = queues_on_every_master(cluster_set)[cluster_set.masters()[0][0]]
        master = cluster_set.master_of(queue_keys(queue).scheduled)
        before = [schedule(queue, i) for i in range(30)]
        assert routed_port(queue) == master.port
        with master.client() as node:
            node.set(f"marker{{{queue}}}", "1")
            assert node.execute_command("WAIT", 1, 2000) == 1  # the replica has them all

        killed = threading.Thread(target=lambda: cluster_set.kill_master(master.port), daemon=True)
        told: list[str] = []
        after: list[str] = []
        failed: list[tuple[float, DelayQueueError]] = []
        killed.start()
        deadline = time.monotonic() + 40
        while len(after) < 30 and time.monotonic() < deadline:
            over = not killed.is_alive()
            started = time.monotonic()
            try:
                job_id = schedule(queue, "during")
            except DelayQueueError as exc:
                failed.append((time.monotonic() - started, exc))
                time.sleep(0.02)
                continue
            told.append(job_id)
            if over:
                after.append(job_id)
        killed.join()
        assert len(after) == 30, failed[-1:]
        assert all(isinstance(exc, RedisUnavailable) for _, exc in failed), failed[:3]
        assert max((t for t, _ in failed), default=0) < 5 * SOCKET_TIMEOUT

        new_master = cluster_set.master_of(queue_keys(queue).scheduled)
        assert new_master.port != master.port
        held = scheduled_on(cluster_set, new_master.port, queue)
        assert set(before) <= set(held) and set(after) <= set(held)
        assert set(held) <= set(before + told)  # no job that no caller was told of
        assert routed_port(queue) == new_master.port
