"""Fixtures: the suite's own Redis (flushed between tests), a real Celery worker and real
delay workers as child processes."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from django.test import Client

import tests.support.fuzzing  # noqa: F401  (Hypothesis profiles, before any test module)
from delayqueue.engine import clients as connection
from tests.support.celery_apps import celery_app_on, close_apps_made, parked_broker_url
from tests.support.corrupt import parked_broker
from tests.support.data_redis import delayqueue_redis, flush, reload_scripts
from tests.support.processes import Process, child_env, start_celery_worker
from tests.support.waiting import wait_for


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``--dist loadgroup`` (the test command's), tests/support/xdist_schedule.py's."""
    if config.getoption("dist") != "loadgroup":
        return None
    from tests.support.xdist_schedule import AloneLastScheduling

    return AloneLastScheduling(config, log)


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix() -> None:
    """The test database keeps its name under pytest-xdist (pytest-django would add the
    worker's id): each worker has a folder of its own (tests/settings.py), and the Celery
    worker and delay workers a test starts open the same file by that name."""


@pytest.fixture(autouse=True)
def r() -> Iterator[redis.Redis]:
    """delayqueue's Redis, empty at the start of every test."""
    client = delayqueue_redis()
    flush(client)
    connection.reset()
    yield client
    reload_scripts(client)
    client.close()


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
    close_apps_made()


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


@pytest.fixture
def superuser(django_user_model: Any) -> Client:
    """A logged-in admin client (the fuzzers' pages)."""
    user = django_user_model.objects.create_superuser("fuzz", "fuzz@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def fresh(r: redis.Redis, parked_celery: Celery) -> Callable[[], None]:
    """Empties the suite's Redis and the parked broker between a property test's examples."""

    def reset() -> None:
        r.flushdb()
        connection.reset()
        parked_broker().delete("celery")

    return reset
