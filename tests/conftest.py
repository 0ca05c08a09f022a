"""Fixtures: the suite's own Redis (flushed between tests), a real Celery worker and real
delay workers as child processes."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery

import tests.fuzzing  # noqa: F401  (Hypothesis profiles, before any test module)
from delayqueue.engine import clients as connection
from tests.processes import Process, child_env


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


def _test_redis(db: int = 0) -> redis.Redis:
    return redis.Redis(
        port=int(os.environ["DQ_TEST_REDIS_PORT"]), db=db, decode_responses=True, socket_timeout=10
    )


@pytest.fixture(autouse=True)
def r() -> Iterator[redis.Redis]:
    """The suite's Redis (delayqueue's database), empty at the start of every test."""
    client = _test_redis()
    if client.info("server")["run_id"] != os.environ["DQ_TEST_REDIS_RUN_ID"]:
        raise RuntimeError("refusing to flush a Redis the test suite did not start")
    client.flushdb()
    connection.reset()
    yield client
    client.close()


def parked_broker_url() -> str:
    """A broker database no Celery worker consumes, so what is published stays there."""
    from django.conf import settings

    return str(settings.CELERY_BROKER_URL).rsplit("/", 1)[0] + "/2"


_apps_made: list[Celery] = []


def celery_app_on(broker_url: str) -> Celery:
    """A Celery app with the suite's tasks and a broker of its own (closed after the test
    that made it, by ``close_what_tests_made``)."""
    from tests import jobs

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
    log = tmp_path_factory.mktemp("celery") / "worker.log"
    worker = Process(
        "celery",
        [sys.executable, "-m", "celery", "-A", "orders_demo", "worker", "-l", "info",
         "-c", "2", "--without-gossip", "--without-mingle", "--without-heartbeat"],
        log,
        child_env(),
    )  # fmt: skip
    try:
        wait_for(lambda: "ready." in worker.output() or worker.popen.poll() is not None, 60)
        if worker.popen.poll() is not None:
            raise RuntimeError(f"Celery worker did not start:\n{worker.output()}")
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def delay_worker(tmp_path: Path) -> Iterator[Callable[..., Process]]:
    """Start ``manage.py run_delay_worker`` children; all are stopped after the test."""
    started: list[Process] = []

    def start(*options: str, ready: bool = True) -> Process:
        log = tmp_path / f"delay-worker-{len(started)}.log"
        worker = Process(
            "delay worker",
            [sys.executable, "manage.py", "run_delay_worker", "-v", "2", *options],
            log,
            child_env(),
        )
        started.append(worker)
        if ready:
            wait_for(lambda: "starting" in worker.output() or worker.popen.poll() is not None, 30)
            assert worker.popen.poll() is None, worker.output()
        return worker

    yield start
    for worker in started:
        worker.stop()
