"""Fixtures: the suite's own Redis (flushed between tests), a real Celery worker and real
delay workers as child processes."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import redis
from celery import Celery
from redis.cluster import RedisCluster

import tests.support.fuzzing  # noqa: F401  (Hypothesis profiles, before any test module)
from delayqueue.engine import clients as connection
from delayqueue.engine.clients import ClusterClient
from tests.support.processes import Process, child_env, start_celery_worker


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02) -> Any:
    """Poll until ``predicate()`` is truthy; its value, or AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)


TOPOLOGY = os.environ.get("DQ_TEST_TOPOLOGY", "single")


def _test_redis(db: int = 0) -> redis.Redis:
    """The suite's single server: db 0 is delayqueue's (on the single topology), db 1 the
    Celery broker's."""
    return redis.Redis(
        port=int(os.environ["DQ_TEST_REDIS_PORT"]), db=db, decode_responses=True, socket_timeout=10
    )


def delayqueue_redis() -> redis.Redis:
    """A client of delayqueue's data wherever DQ_TEST_TOPOLOGY put it: the single server,
    the Sentinel set's master, or the cluster (a RedisCluster, typed as the others)."""
    if TOPOLOGY == "cluster":
        cluster = ClusterClient.from_url(
            os.environ["REDIS_URL"], decode_responses=True, socket_timeout=10
        )
        return cast(redis.Redis, cluster)
    return redis.Redis.from_url(os.environ["REDIS_URL"], decode_responses=True, socket_timeout=10)


def _flush(client: redis.Redis) -> None:
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


@pytest.fixture(autouse=True)
def r() -> Iterator[redis.Redis]:
    """delayqueue's Redis, empty at the start of every test."""
    client = delayqueue_redis()
    _flush(client)
    connection.reset()
    yield client
    client.close()


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


def parked_broker_url() -> str:
    """A broker database no Celery worker consumes, so what is published stays there."""
    from django.conf import settings

    return str(settings.CELERY_BROKER_URL).rsplit("/", 1)[0] + "/2"


_apps_made: list[Celery] = []


def celery_app_on(broker_url: str) -> Celery:
    """A Celery app with the suite's tasks and a broker of its own (closed after the test
    that made it, by ``close_what_tests_made``)."""
    from tests.support import jobs

    app = Celery(broker=broker_url)
    for name, task in jobs.record.app.tasks.items():
        app.tasks[name] = task
    _apps_made.append(app)
    return app


@pytest.fixture(autouse=True)
def close_what_tests_made(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close every in-process DelayWorker (its publisher's broker connection and wake
    channel) and every Celery app of ``celery_app_on`` a test made: a Redis connection
    left to the garbage collector inside a reference cycle (Celery apps are full of them)
    can have its socket finalized first, which Python reports as an unclosed socket."""
    from delayqueue.worker.loop import DelayWorker

    made: list[DelayWorker] = []
    init = DelayWorker.__init__

    def record(self: DelayWorker, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(DelayWorker, "__init__", record)
    yield
    for worker in made:
        worker.close()
    while _apps_made:
        # the broker connections of the app's pool (Celery.close() would only drop the pool
        # and deregister the app, so shared tasks imported later would miss the current app)
        app = _apps_made.pop()
        pool = getattr(app, "_pool", None)
        setattr(app, "_pool", None)  # noqa: B010  (a later use makes a new pool)
        if pool is not None:
            pool.force_close_all()


@pytest.fixture
def parked_celery(monkeypatch: pytest.MonkeyPatch) -> Celery:
    """A Celery app whose messages nobody consumes (the session's Celery worker must not run
    what an in-process worker test dispatches)."""
    monkeypatch.delenv("CELERY_BROKER_URL")  # Celery prefers it to an app's own broker
    with redis.Redis.from_url(parked_broker_url()) as broker:
        broker.delete("celery")
    return celery_app_on(parked_broker_url())


@pytest.fixture(scope="session")
def celery_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    """A real Celery worker (prefork, 2 processes) on the suite's broker."""
    worker = start_celery_worker(tmp_path_factory.mktemp("celery") / "worker.log")
    try:
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def delay_worker(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Start ``manage.py run_delay_worker`` children; all are stopped after the test."""
    started: list[Process] = []

    def start(*options: str, ready: bool = True, env: dict[str, str] | None = None) -> Process:
        log = tmp_path / f"delay-worker-{len(started)}.log"
        worker = Process(
            "delay worker",
            [sys.executable, "manage.py", "run_delay_worker", "-v", "2", *options],
            log,
            child_env(**(env or {})),
        )
        started.append(worker)
        if ready:
            wait_for(lambda: "starting" in worker.output() or worker.popen.poll() is not None, 30)
            assert worker.popen.poll() is None, worker.output()
        return worker

    yield start
    for worker in started:
        worker.stop()
