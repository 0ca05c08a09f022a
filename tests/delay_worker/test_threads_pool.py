"""A Celery worker whose pool runs jobs in its own process (``-P threads``): a job handed
over ahead of its due time (DISPATCH_AHEAD) waits in the consumer until shortly before it,
not in a pool thread, so the pool's threads stay free for the jobs due now
(delayqueue/runner/held.py)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from django.conf import settings

from delayqueue.engine.keys import queue_keys
from tests.support import jobs
from tests.support.processes import Process, child_env, start_celery_worker
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _broker_url() -> str:
    """A broker database of this test's own: the session's Celery worker never sees it."""
    return str(settings.CELERY_BROKER_URL).rsplit("/", 1)[0] + "/7"


@pytest.fixture
def threads_worker(tmp_path: Path) -> Iterator[tuple[Process, Process]]:
    """A Celery worker with one pool thread (``-P threads -c 1``) and a delay worker that
    hands jobs over a second ahead (DISPATCH_AHEAD 1.0), on a broker of their own."""
    with redis.Redis.from_url(_broker_url()) as broker:
        broker.flushdb()
    env = child_env(
        DJANGO_SETTINGS_MODULE="tests.delay_worker.ahead_settings",
        CELERY_BROKER_URL=_broker_url(),
        DQ_TEST_BROKER_URL=_broker_url(),
    )
    started: list[Process] = []
    try:
        celery = start_celery_worker(tmp_path / "celery.log", "-P", "threads", "-c", "1", env=env)
        started.append(celery)
        delay = Process(
            "delay worker",
            [sys.executable, "manage.py", "run_delay_worker", "-v", "2", "--queues", "tests"],
            tmp_path / "delay.log",
            env,
        )
        started.append(delay)
        wait_for(lambda: "starting" in delay.output() or not delay.alive(), 30)
        assert delay.alive(), delay.output()
        yield celery, delay
    finally:
        for process in reversed(started):
            process.stop()


@pytest.mark.parametrize("task", ["record", "batched"], ids=["own message", "batch message"])
def test_a_job_handed_over_ahead_leaves_the_only_pool_thread_free(
    r: redis.Redis, threads_worker: tuple[Process, Process], task: str
) -> None:
    celery, delay = threads_worker
    later = getattr(jobs, task).delay_for("later", seconds=2.0)  # (batched: batch=5)
    assert later.due_at is not None
    due = later.due_at.timestamp()
    # claimed and handed over a second before its due time; its message reaches the worker
    wait_for(lambda: r.zscore(queue_keys("tests").inflight, later.id) is not None, 10, 0.01)
    time.sleep(0.2)
    jobs.record.delay_for("now", seconds=0)
    logs = f"--- celery\n{celery.output()[-4000:]}\n--- delay\n{delay.output()[-3000:]}"
    wait_for(lambda: len(jobs.ran()) >= 2, 20)
    started = {str(run["tag"]): float(run["at"]) for run in jobs.ran()}  # type: ignore[arg-type]
    # The job due now ran at once: the thread was not holding the later job until its due
    # time (which it would have, about 0.8 s).
    assert started["now"] < due - 0.5, (started["now"] - due, logs)
    # and the later job still started at its due time, not before
    assert due - 0.001 <= started["later"] < due + 0.5, (started["later"] - due, logs)
    if task == "batched":
        assert "delayqueue.run_batch" in celery.output(), logs


def _local_ports(pid: int) -> set[int]:
    """The local ports of the TCP sockets process ``pid`` holds (Linux's /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd") or os.environ.get("DQ_TEST_TOPOLOGY") != "single",
    reason="reads Linux's /proc; one Redis, delayqueue's jobs in its database 0",
)
def test_the_pool_connects_to_redis_before_its_first_job(
    r: redis.Redis, threads_worker: tuple[Process, Process]
) -> None:
    """No pool process starts (no worker_process_init): the worker connects its jobs'
    direct connection at worker_ready (the first job does not pay for it), beside the one
    its announcements use."""
    celery, _ = threads_worker

    def connections() -> int:
        """The worker's connections to delayqueue's database (not the broker's)."""
        ports = _local_ports(celery.pid)
        return sum(
            1
            for client in r.client_list()
            if client["db"] == "0" and int(client["addr"].rsplit(":", 1)[1]) in ports
        )

    wait_for(lambda: connections() >= 2, 10)
    assert jobs.ran() == []
