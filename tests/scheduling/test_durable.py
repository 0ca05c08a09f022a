"""Durable writes: ``durable=True`` per call, ``@delayed_task(durable=True)`` per task and the
``DURABLE`` setting for every write (the worker's too) wait for a replica with Redis WAIT in
the same round trip, and say so with NotDurable when none acknowledges in time, the job
written all the same. On a Sentinel set of its own, a cluster of its own, and the suite's
single server (no replica)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery

import delayqueue
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import InvalidOption, NotDurable
from delayqueue.runner.job import run_job
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.data_redis import command_calls, only_on
from tests.support.topologies import MASTER_NAME, ClusterSet, SentinelSet

Q = queue_keys("tests")


def _waits(client: redis.Redis) -> int:
    return command_calls(client, "wait")


# ---- no replica: the suite's own server -------------------------------------------------------


@only_on("single")
def test_without_a_replica_a_durable_write_is_written_and_says_it_is_not_durable(
    r: redis.Redis, settings: Any
) -> None:
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "DURABLE_TIMEOUT": 0.2}
    started = time.monotonic()
    with pytest.raises(NotDurable) as caught:
        jobs.record.delay_for("x", seconds=60, on_commit=False, durable=True)
    assert 0.2 <= time.monotonic() - started < 2.0  # WAIT's own timeout, not a hang
    assert "0 of 1 replicas" in str(caught.value) and "written" in str(caught.value)
    assert r.zcard(Q.scheduled) == 1  # nothing lost: the caller can look it up or retry

    # a task that says durable=True waits without being told at the call
    with pytest.raises(NotDurable):
        jobs.durable_record.delay_for("y", seconds=60, on_commit=False)
    assert r.zcard(Q.scheduled) == 2
    # and a call may say otherwise
    jobs.durable_record.delay_for("z", seconds=60, on_commit=False, durable=False)
    assert r.zcard(Q.scheduled) == 3


@only_on("single")
def test_durable_values_are_checked_at_the_call(r: redis.Redis) -> None:
    with pytest.raises(InvalidOption, match="durable must be True or False"):
        jobs.record.delay_for("x", seconds=5, on_commit=False, durable="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidOption, match="durable must be True or False"):
        delayqueue.delayed_task(durable=1)(lambda: None)  # type: ignore[call-overload]
    assert r.zcard(Q.scheduled) == 0


@only_on("single")
def test_the_worker_under_durable_warns_and_still_dispatches(
    r: redis.Redis, settings: Any, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker's own writes wait too, but a claim a replica did not acknowledge is still
    dispatched (a failover would only run it again): a warning, not a stop."""
    job = jobs.record.delay_for("due", seconds=0, on_commit=False)
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "DURABLE": True, "DURABLE_TIMEOUT": 0.1}
    before = _waits(r)
    result = DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    assert [claimed.id for claimed in result.claimed] == [job.id]
    assert _waits(r) > before
    assert any("0 of 1 replicas" in record.getMessage() for record in caplog.records)


@only_on("single")
def test_under_durable_a_job_without_a_replica_still_runs_and_is_acked(
    r: redis.Redis, settings: Any, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    """begin, ack and fail are the Celery side's writes: a replica slow to acknowledge them
    is a warning; the task runs and its job is acked or retried, not left to be reaped."""
    ok = jobs.record.delay_for("ok", seconds=0, on_commit=False)
    bad = jobs.record.delay_for("bad", seconds=0, on_commit=False)
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "DURABLE": True, "DURABLE_TIMEOUT": 0.05}
    claimed = {c.id: c for c in DelayWorker(["tests"], celery_app=parked_celery).run_pass().claimed}
    assert run_job(lambda: "done", [], {}, ("tests", ok.id, claimed[ok.id].token)) == "done"
    assert r.zscore(Q.inflight, ok.id) is None and not r.exists(Q.job(ok.id))  # acked

    def boom() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError):
        run_job(boom, [], {}, ("tests", bad.id, claimed[bad.id].token), backoff=0)
    assert r.zscore(Q.scheduled, bad.id) is not None  # retried, not left in flight
    assert sum("0 of 1 replicas" in rec.getMessage() for rec in caplog.records) >= 3


# ---- Sentinel: a master and its replica ---------------------------------------------------------


@pytest.fixture(scope="module")
def sentinels() -> Iterator[SentinelSet]:
    topology = SentinelSet().start()
    try:
        yield topology
    finally:
        topology.cleanup()


@pytest.fixture
def master(sentinels: SentinelSet, settings: Any) -> Iterator[redis.Redis]:
    client = sentinels.master_client()
    client.flushall()  # a server this module started
    settings.DELAYQUEUE = {
        **settings.DELAYQUEUE,
        "REDIS_URL": sentinels.url,
        "SENTINEL_MASTER": MASTER_NAME,
        "DURABLE_TIMEOUT": 0.5,
    }
    yield client
    client.close()


def _replica(sentinels: SentinelSet) -> Any:
    return next(s for s in sentinels.servers if s is not sentinels.master)


def test_a_durable_write_is_on_the_replica_when_the_call_returns(
    master: redis.Redis, sentinels: SentinelSet
) -> None:
    with _replica(sentinels).client() as replica:
        for i in range(20):  # each read right after its call: WAIT, not luck
            job = jobs.record.delay_for(i, seconds=60, on_commit=False, durable=True)
            assert replica.zscore(Q.scheduled, job.id) is not None
        jobs.durable_record.delay_for("key", seconds=60, key="k", on_commit=False)
        assert jobs.durable_record.cancel(key="k") is True
        assert replica.hget(Q.dedupe, "k") is None
        specs = [delayqueue.spec(jobs.record, (i,), delay=60, durable=True) for i in range(50)]
        made = delayqueue.delay_many(specs, on_commit=False)
        assert replica.zmscore(Q.scheduled, [job.id for job in made]) == [
            pytest.approx(float(s.ms), abs=10**13) for s in specs
        ]


def test_a_replica_that_does_not_answer_makes_a_durable_write_not_durable(
    master: redis.Redis, sentinels: SentinelSet
) -> None:
    replica = _replica(sentinels)
    assert replica.process is not None
    os.kill(replica.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(NotDurable):
            jobs.record.delay_for("paused", seconds=60, on_commit=False, durable=True)
        assert time.monotonic() - started < 2.0
        assert master.zcard(Q.scheduled) == 1  # written on the master
        jobs.record.delay_for("not durable", seconds=60, on_commit=False)  # no wait asked
        assert master.zcard(Q.scheduled) == 2
    finally:
        os.kill(replica.process.pid, signal.SIGCONT)


# ---- Cluster: one WAIT per master a write went to ------------------------------------------------


def test_on_a_cluster_each_master_written_waits_for_its_replica(settings: Any) -> None:
    with ClusterSet() as topology:
        settings.DELAYQUEUE = {
            **settings.DELAYQUEUE,
            "REDIS_URL": topology.url,
            "REDIS_CLUSTER": True,
            "DURABLE": True,
        }
        queues: dict[int, str] = {}
        for i in range(200):
            port = topology.master_of(queue_keys(f"q{i}").scheduled).port
            queues.setdefault(port, f"q{i}")
        assert len(queues) == 3
        # the scripts loaded on every master first (a NOSCRIPT round would WAIT twice)
        delayqueue.delay_many(
            [delayqueue.spec(jobs.record, ("warm",), queue=q, delay=60) for q in queues.values()],
            on_commit=False,
        )
        waits_before = {port: _node_waits(topology, port) for port in queues}
        specs = [
            delayqueue.spec(jobs.record, (n,), queue=queue, delay=60)
            for queue in queues.values()
            for n in range(5)
        ]
        made = delayqueue.delay_many(specs, on_commit=False)
        for port, queue in queues.items():
            assert _node_waits(topology, port) == waits_before[port] + 1
            replica = next(s for s in topology.servers if s.port != port and _replica_of(s, port))
            with replica.client() as on_replica:
                on_replica.execute_command("READONLY")  # a replica's own data, no MOVED
                ids = {job.id for job in made if job.queue == queue}
                assert ids <= set(on_replica.zrange(queue_keys(queue).scheduled, 0, -1))


def _node_waits(topology: ClusterSet, port: int) -> int:
    with topology.server_on(port).client() as node:
        return int(node.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def _replica_of(server: Any, master_port: int) -> bool:
    with server.client() as node:
        info = node.info("replication")
    return info.get("role") == "slave" and int(info.get("master_port", 0)) == master_port
