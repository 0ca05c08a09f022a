"""Redis Cluster: delayqueue with ``REDIS_CLUSTER`` against a real cluster of its own (3
masters, 3 replicas; tests/support/topologies.py): queues on different masters, one worker pass over
all of them, the wake channel across nodes, a failover with the same client, the checks.
(test_topologies.py runs the core modules on a cluster too.)"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from celery import Celery
from django.core.checks import run_checks
from django.test import override_settings

import delayqueue
from delayqueue.engine import clients
from delayqueue.engine import direct as direct_path
from delayqueue.engine.clients import get_redis
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.shards import shard_names
from delayqueue.errors import DelayQueueError, RedisUnavailable
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.data_redis import info_everywhere
from tests.support.on_cluster import point_delayqueue_at, queues_on_every_master, scheduled_on
from tests.support.redis_server import free_port
from tests.support.topologies import ClusterSet
from tests.support.waiting import wait_for


def test_each_queue_lives_on_the_master_of_its_slot(
    cluster: redis.Redis, cluster_set: ClusterSet
) -> None:
    by_master = queues_on_every_master(cluster_set)
    assert len(by_master) == 3
    made = {
        port: delayqueue.enqueue(jobs.record, (port,), queue=queue, delay=60, on_commit=False)
        for port, queue in by_master.items()
    }
    for port, queue in by_master.items():
        assert scheduled_on(cluster_set, port, queue) == [made[port].id]
    assert isinstance(get_redis(), clients.ClusterClient)
    # delay_for takes a connection to its queue's master (test_cluster_direct.py), not the
    # single server's direct connections
    job = jobs.record.delay_for("direct?", seconds=60, key="k1", on_commit=False)
    assert direct_path.connections.made is None
    assert jobs.record.reschedule(key="k1", seconds=5) is not None
    assert jobs.record.cancel(key="k1") is True
    assert cluster.zscore(queue_keys("tests").scheduled, job.id) is None


def test_a_sharded_queue_spreads_over_the_masters(
    cluster: redis.Redis, cluster_set: ClusterSet
) -> None:
    made = jobs.sharded.delay_many([(i,) for i in range(40)], seconds=60, on_commit=False)
    masters = {
        cluster_set.master_of(queue_keys(shard).scheduled).port for shard in shard_names("sharded")
    }
    assert len(masters) >= 2  # 4 shards, 4 hash tags: not all on one master
    for job in made:
        on = cluster_set.master_of(queue_keys(job.queue).scheduled).port
        assert job.id in scheduled_on(cluster_set, on, job.queue)


def test_one_worker_pass_claims_from_queues_on_every_master(
    cluster: redis.Redis, cluster_set: ClusterSet, parked_celery: Celery
) -> None:
    by_master = queues_on_every_master(cluster_set)
    due = {
        queue: {
            delayqueue.enqueue(jobs.record, (i,), queue=queue, delay=0, on_commit=False).id
            for i in range(4)
        }
        for queue in by_master.values()
    }
    calls_before = _evalsha_calls(cluster)
    result = DelayWorker(list(by_master.values()), celery_app=parked_celery).run_pass()
    claimed = {queue: {job.id for job in result.claimed if job.queue == queue} for queue in due}
    assert claimed == due
    for port, queue in by_master.items():
        with cluster_set.server_on(port).client() as node:
            assert set(node.zrange(queue_keys(queue).inflight, 0, -1)) == due[queue]
    # each master ran its own queue's scripts: the pass was split by node, not sent to one
    calls = _evalsha_calls(cluster)
    assert all(calls[port] > calls_before.get(port, 0) for port in by_master)


def _evalsha_calls(cluster: redis.Redis) -> dict[int, int]:
    found: dict[int, int] = {}
    for server, stats in zip(
        _primaries(cluster), info_everywhere(cluster, "commandstats"), strict=True
    ):
        found[server] = int(stats.get("cmdstat_evalsha", {}).get("calls", 0))
    return found


def _primaries(cluster: redis.Redis) -> list[int]:
    return [int(node.port) for node in cluster.get_primaries()]  # type: ignore[attr-defined]


def test_the_wake_channel_wakes_a_worker_subscribed_on_another_node(
    cluster: redis.Redis, cluster_set: ClusterSet, parked_celery: Celery
) -> None:
    by_master = queues_on_every_master(cluster_set)
    worker = DelayWorker(list(by_master.values()), celery_app=parked_celery)
    worker._refresh_queues()  # subscribes to the queues' wake channels
    listening = worker.wake.port
    assert listening is not None
    queue = next(q for port, q in by_master.items() if port != listening)

    def wake() -> None:
        delayqueue.enqueue(jobs.record, ("wake",), queue=queue, delay=0, on_commit=False)

    threading.Timer(0.3, wake).start()
    started = time.monotonic()
    worker._sleep(10.0)
    assert time.monotonic() - started < 3.0  # woken by the message, not the 10 s timeout
    assert [job.queue for job in worker.run_pass().claimed] == [queue]


def test_failover_keeps_replicated_jobs_and_the_same_client_recovers(
    settings: Any, parked_celery: Celery, capsys: pytest.CaptureFixture[str]
) -> None:
    """A SIGKILLed master's replica takes over its slots; jobs the replica had survive; the
    client made before, never reset, reaches the new master; meanwhile a caller sees
    delayqueue's RedisUnavailable, each call within a bounded time."""
    with ClusterSet() as cluster_set:
        point_delayqueue_at(cluster_set, settings).close()
        queue = queue_keys("tests")
        written = [jobs.record.delay_for(i, seconds=0, on_commit=False) for i in range(20)]
        master = cluster_set.master_of(queue.scheduled)
        with master.client() as node:
            node.set(f"marker{{{'tests'}}}", "1")
            assert node.execute_command("WAIT", 1, 1000) == 1

        errors: list[tuple[float, DelayQueueError]] = []
        killed = threading.Thread(target=lambda: cluster_set.kill_master(master.port))
        killed.start()
        started = time.monotonic()
        after = None
        while time.monotonic() - started < 30:
            call = time.monotonic()
            try:
                after = jobs.record.delay_for("after", seconds=0, on_commit=False)
                if killed.is_alive():
                    time.sleep(0.05)  # the kill may not have happened yet: go on calling
                    continue
                break
            except DelayQueueError as exc:  # nothing else may come out: not redis-py's
                errors.append((time.monotonic() - call, exc))
                time.sleep(0.05)
        recovered = time.monotonic() - started
        killed.join()
        assert after is not None, errors[-1:]
        assert all(isinstance(exc, RedisUnavailable) for _, exc in errors), errors
        assert recovered < 20

        new_master = cluster_set.master_of(queue.scheduled)
        assert new_master.port != master.port
        ids = set(scheduled_on(cluster_set, new_master.port, "tests"))
        assert {job.id for job in written} <= ids and after.id in ids

        claimed = wait_for(lambda: _claim(parked_celery), timeout=10, interval=0.2)
        assert {job.id for job in written} <= {job.id for job in claimed}

        # A client started now (a new process) through the dead node alone cannot start;
        # naming several nodes, it asks the next.
        dead = f"redis://127.0.0.1:{master.port}/0"
        settings.DELAYQUEUE = {**settings.DELAYQUEUE, "REDIS_URL": dead}
        with pytest.raises(RedisUnavailable):
            jobs.record.delay_for("via the dead node", seconds=60, on_commit=False)
        settings.DELAYQUEUE = {**settings.DELAYQUEUE, "REDIS_URL": f"{dead};{cluster_set.url}"}
        assert jobs.record.delay_for("via the next", seconds=60, on_commit=False).id
        with capsys.disabled():
            longest = max((t for t, _ in errors), default=0)
            print(
                f"\nCluster failover: delay_for failed {len(errors)} times, recovered "
                f"{recovered:.2f} s after the kill began (longest failed call {longest:.3f} s)"
            )


def _claim(app: Celery) -> list[Any]:
    worker = DelayWorker(["tests"], claim_size=100, celery_app=app)
    try:
        return list(worker.run_pass().claimed)
    except DelayQueueError:
        return []


# ---- settings -------------------------------------------------------------------------------


def check_ids(**delayqueue_settings: Any) -> set[str]:
    with override_settings(DELAYQUEUE=delayqueue_settings):
        return {str(m.id) for m in run_checks() if str(m.id).startswith("delayqueue.")}


def test_cluster_settings_are_checked_without_connecting() -> None:
    closed = f"redis://127.0.0.1:{free_port()}/0"
    started = time.monotonic()
    assert check_ids(REDIS_URL=closed, REDIS_CLUSTER=True) == set()
    assert time.monotonic() - started < 1.0
    assert check_ids(REDIS_URL=closed.replace("/0", "/3"), REDIS_CLUSTER=True) == {
        "delayqueue.E011"
    }
    assert "delayqueue.E011" in check_ids(
        REDIS_URL="sentinel://127.0.0.1:26379/0", REDIS_CLUSTER=True
    )
    assert check_ids(REDIS_URL="unix:///tmp/redis.sock", REDIS_CLUSTER=True) == {"delayqueue.E011"}
    assert "delayqueue.E004" in check_ids(REDIS_URL=closed, REDIS_CLUSTER="yes")
    several = f"{closed};redis://127.0.0.1:{free_port()}/0"
    assert check_ids(REDIS_URL=several, REDIS_CLUSTER=True) == set()
    assert check_ids(REDIS_URL=f"{closed};redis://h:1/2", REDIS_CLUSTER=True) == {"delayqueue.E011"}


def test_an_unreachable_cluster_is_redis_unavailable_at_the_call(settings: Any) -> None:
    url = f"redis://:pw-secret@127.0.0.1:{free_port()}/0"
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "REDIS_URL": url, "REDIS_CLUSTER": True}
    started = time.monotonic()
    with pytest.raises(RedisUnavailable) as caught:
        jobs.record.delay_for("x", seconds=5, on_commit=False)
    assert time.monotonic() - started < 15
    assert "pw-secret" not in str(caught.value)
