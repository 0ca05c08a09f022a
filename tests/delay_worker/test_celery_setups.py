"""Every job runs, on any Celery set-up: apps that list their task modules themselves, import
them, import them under another name, or share a project with another app; each with the
real prefork worker (Celery's default, two processes) and a burst large enough for the
batched hand-off."""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings

import delayqueue
from delayqueue.engine import presence
from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.worker.handoff import REFRESH_SECONDS, START_CHECK_SECONDS
from tests.setups import burst_tasks
from tests.support.processes import Process, child_env
from tests.support.waiting import wait_for

Q = queue_keys("setups")
BURST = 1_000  # far past the batched hand-off's threshold (64 due at once)


def _broker_url() -> str:
    """A broker database of the set-up tests' own: the session's Celery worker never sees it."""
    return str(settings.CELERY_BROKER_URL).rsplit("/", 1)[0] + "/3"


class SetUp:
    """A Celery worker and a delay worker, both on the Celery app ``app_path``."""

    def __init__(self, app_path: str, tmp_path: Path, **extra: str) -> None:
        self.app_path, self.tmp_path, self.extra = app_path, tmp_path, extra
        self.celery: Process | None = None
        self.delay: Process | None = None

    def start(self) -> SetUp:
        with redis.Redis.from_url(_broker_url()) as broker:
            broker.delete("celery")
        env = child_env(
            DJANGO_SETTINGS_MODULE="tests.setups.settings",
            DQ_TEST_CELERY_APP=self.app_path,
            CELERY_BROKER_URL=_broker_url(),
            DQ_TEST_BROKER_URL=_broker_url(),
        )
        celery_env = {**env, **self.extra}
        self.celery = Process(
            "celery",
            [sys.executable, "-m", "celery", "-A", self.app_path, "worker",
             "-l", "info", "-c", "2", "--without-gossip", "--without-mingle"],
            self.tmp_path / "celery.log",
            {name: value for name, value in celery_env.items() if value},
        )  # fmt: skip
        celery = self.celery
        wait_for(lambda: "ready." in celery.output() or not celery.alive(), 60)
        assert celery.alive(), celery.output()
        self.delay = Process(
            "delay worker",
            [sys.executable, "manage.py", "run_delay_worker", "-v", "2", "--queues", "setups"],
            self.tmp_path / "delay.log",
            env,
        )
        delay = self.delay
        wait_for(lambda: "starting" in delay.output() or not delay.alive(), 30)
        assert delay.alive(), delay.output()
        return self

    def logs(self) -> str:
        celery = self.celery.output()[-6000:] if self.celery else ""
        delay = self.delay.output()[-4000:] if self.delay else ""
        return f"--- celery\n{celery}\n--- delay\n{delay}"

    def stop(self) -> None:
        for process in (self.delay, self.celery):
            if process is not None:
                process.stop()


@pytest.fixture
def set_up(tmp_path: Path) -> Iterator[Any]:
    made: list[SetUp] = []

    def start(app_path: str, **extra: str) -> SetUp:
        made.append(SetUp(app_path, tmp_path, **extra))  # (stopped even if it fails to start)
        return made[-1].start()

    yield start
    for each in made:
        each.stop()


def _ran(r: redis.Redis) -> Counter[str]:
    return Counter(str(tag) for tag in r.lrange(burst_tasks.RAN, 0, -1))


def _every_job_ran_once(
    r: redis.Redis, setup: SetUp, tags: list[str], unregistered_ok: bool = False
) -> None:
    try:
        wait_for(lambda: sum(_ran(r).values()) >= len(tags), 90, 0.2)
        wait_for(lambda: r.zcard(Q.inflight) == 0 and r.zcard(Q.scheduled) == 0, 30, 0.2)
    except AssertionError:
        raise AssertionError(
            f"{sum(_ran(r).values())} of {len(tags)} ran; "
            f"in flight {r.zcard(Q.inflight)}, dead {r.zcard(Q.dead)}\n{setup.logs()}"
        ) from None
    ran = _ran(r)
    assert set(ran) == set(tags), setup.logs()
    assert max(ran.values()) == 1, [tag for tag, n in ran.items() if n > 1][:5]
    assert r.zcard(Q.dead) == 0
    if not unregistered_ok:
        assert setup.celery is not None
        assert "unregistered task" not in setup.celery.output()


SET_UPS = [
    "tests.setups.include_app:app",  # Celery(include=[...])
    "tests.setups.importing_app:app",  # the app's module imports its tasks
    "tests.setups.two_apps:second",  # two apps in one project
    "orders_demo.celery:app",  # the Django project template: autodiscover_tasks()
]


@pytest.mark.parametrize("app_path", SET_UPS, ids=lambda path: path.split(".")[-1])
def test_a_burst_of_delayed_task_jobs_runs_every_job_once(
    r: redis.Redis, set_up: Any, app_path: str
) -> None:
    setup = set_up(app_path)
    tags = [f"job-{i}" for i in range(BURST)]
    burst_tasks.burst.delay_many([(tag,) for tag in tags], seconds=1, on_commit=False)
    _every_job_ran_once(r, setup, tags)
    assert setup.delay is not None and "dispatched" in setup.delay.output()


def test_a_task_imported_under_another_name_runs_by_its_explicit_name(
    r: redis.Redis, set_up: Any
) -> None:
    setup = set_up("tests.setups.renamed_app:app")
    tags = [f"named-{i}" for i in range(BURST)]
    burst_tasks.named_burst.delay_many([(tag,) for tag in tags], seconds=1, on_commit=False)
    _every_job_ran_once(r, setup, tags)


@pytest.mark.parametrize("app_path", SET_UPS[:2], ids=lambda path: path.split(".")[-1])
def test_a_burst_of_plain_celery_task_jobs_runs_every_job_once(
    r: redis.Redis, set_up: Any, app_path: str
) -> None:
    setup = set_up(app_path)
    tags = [f"plain-{i}" for i in range(300)]
    specs = [delayqueue.spec("setups.plain", [tag], queue="setups", delay=1) for tag in tags]
    delayqueue.delay_many(specs, on_commit=False)
    _every_job_ran_once(r, setup, tags)


def _fallback(r: redis.Redis, task: str) -> dict[str, Any] | None:
    raw = r.hget(global_keys().fallbacks, task)
    return None if raw is None else dict(json.loads(raw))


@pytest.mark.parametrize("silent", [False, True], ids=["side-settles", "delay-worker-notices"])
def test_batches_a_celery_worker_discards_fall_back_to_single_messages(
    r: redis.Redis, set_up: Any, silent: bool
) -> None:
    """A Celery side that cannot run delayqueue.run_batch (a version before it): the task's
    jobs go one to a message from the first discarded batch on, noticed by the Celery side
    at once, or (a side that says nothing) by the delay worker's watch within seconds, not
    after a visibility timeout; every job runs once."""
    # a Celery worker with delayqueue's side, on another broker: it does not run these
    presence.announce("celery@elsewhere", 1, "redis://127.0.0.1:1/9", ["celery"])
    setup = set_up("tests.setups.old_side_app:app", DQ_TEST_SILENT_SIDE=str(int(silent)))
    tags = [f"job-{i}" for i in range(300)]
    started = time.monotonic()
    burst_tasks.burst.delay_many([(tag,) for tag in tags], seconds=1, on_commit=False)
    _every_job_ran_once(r, setup, tags, unregistered_ok=True)
    took = time.monotonic() - started
    # seconds, not the visibility timeout (300 s) a discarded dispatch used to wait for
    assert took < (START_CHECK_SECONDS + REFRESH_SECONDS + 30 if silent else 30), took
    fallback = _fallback(r, burst_tasks.burst.name)
    assert fallback is not None and fallback["form"] == "single", fallback
    assert "run_batch" in fallback["reason"]
    assert setup.delay is not None
    delay = setup.delay

    def said() -> int:  # (the delay worker reads the fallbacks every REFRESH_SECONDS)
        return delay.output().count("jobs of tests.setups.burst_tasks.burst are handed")

    wait_for(said, REFRESH_SECONDS * 3, 0.1)
    assert said() == 1, setup.logs()  # said once
    if not silent:  # the side that discarded it said so itself
        assert fallback["by"].startswith("celery@"), fallback


def test_plain_task_jobs_a_celery_worker_without_delayqueue_discards_run_as_the_task(
    r: redis.Redis, set_up: Any
) -> None:
    """A service's Celery worker without delayqueue (no Django, no import): run_task is
    discarded there, so the plain task's jobs are sent as the task itself and acked when
    published: each runs once."""
    presence.announce("celery@elsewhere", 1, "redis://127.0.0.1:1/9", ["celery"])
    setup = set_up("tests.setups.bare_app:app", DJANGO_SETTINGS_MODULE="")
    tags = [f"plain-{i}" for i in range(100)]
    specs = [delayqueue.spec("setups.plain", [tag], queue="setups", delay=1) for tag in tags]
    delayqueue.delay_many(specs, on_commit=False)
    _every_job_ran_once(r, setup, tags, unregistered_ok=True)
    fallback = _fallback(r, "setups.plain")
    assert fallback is not None and fallback["form"] == "plain", fallback
