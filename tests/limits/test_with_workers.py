"""Limits with real workers: two delay workers and two Celery workers of three processes each
(six runs at once could happen), none of them tuned to a test.

The rate is counted where each run starts, on Redis's clock: begin.lua moves the run's entry
in the rate's log to its start and checks the window up to it (docs/limits.md, "Clock and
skew"). The instants begin counted (read back by the task from the log) are exact; the task's
own reading of Redis's clock comes after its begin by BEGIN_TO_TASK at most (begin's reply, the
runner's code up to the task, one round trip), so at the tasks the test checks windows
shortened by that."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from delayqueue.engine.keys import queue_keys
from delayqueue.services import operations
from tests.support import limit_tasks
from tests.support.processes import Process, start_celery_worker
from tests.support.waiting import wait_for

Q = queue_keys(limit_tasks.QUEUE)
BEGIN_TO_TASK = 0.05  # seconds: begin.lua's clock -> the task's first TIME (a loaded machine)


def start_celery(log: Path) -> Process:
    return start_celery_worker(log, "-c", "3", "-n", f"{log.stem}@%h")


@pytest.fixture(scope="module")
def celery_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Process]]:
    folder = tmp_path_factory.mktemp("limits")
    workers = [start_celery(folder / f"celery-{i}.log") for i in range(2)]
    yield workers
    for worker in workers:
        worker.stop()


@pytest.fixture
def workers(
    celery_workers: list[Process], delay_worker: Callable[..., Process], tmp_path: Path
) -> list[Process]:
    """Two delay workers on the limits queue beside the Celery workers."""
    for worker in list(celery_workers):
        if not worker.alive():  # a test killed it: a new one in its place
            celery_workers[celery_workers.index(worker)] = start_celery(
                tmp_path / f"celery-{worker.pid}.log"
            )
    return [delay_worker("--queues", limit_tasks.QUEUE) for _ in range(2)]


def most_in_a_window(times: list[float], window: float) -> int:
    """The most of ``times`` inside any half-open window [t, t + window)."""
    ordered = sorted(times)
    best, low = 0, 0
    for high, t in enumerate(ordered):
        while ordered[low] <= t - window:
            low += 1
        best = max(best, high - low + 1)
    return best


def most_at_once(runs: list[dict[str, object]]) -> int:
    """The most runs whose [start, end] overlap at one instant."""
    edges = sorted(
        [(float(str(run["start"])), 1) for run in runs]
        + [(float(str(run["end"])), -1) for run in runs]
    )
    best = current = 0
    for _, step in edges:
        current += step
        best = max(best, current)
    return best


def all_settled(r: redis.Redis) -> bool:
    return r.zcard(Q.scheduled) == 0 and r.zcard(Q.inflight) == 0


def test_never_more_starts_than_the_rate_in_any_window(
    r: redis.Redis, workers: list[Process]
) -> None:
    r.delete(limit_tasks.RUNS)
    for i in range(25):
        limit_tasks.rated.delay_for(f"r{i}", seconds=0, on_commit=False)
    for i in range(12):
        limit_tasks.rated_batched.delay_for(f"b{i}", seconds=0, on_commit=False)
    wait_for(lambda: len(limit_tasks.runs()) >= 37 and all_settled(r), 60)
    runs = limit_tasks.runs("rated")
    assert sorted(str(run["tag"]) for run in runs) == sorted(f"r{i}" for i in range(25))
    # (a run handed over in a form without its dispatch's headers says none)
    begun = [float(str(run["begun_ms"])) / 1000 for run in runs if run["begun_ms"]]
    assert len(begun) >= 10, runs
    assert most_in_a_window(begun, 1.0) <= 5  # exact, on Redis's clock
    at_task = [float(str(run["redis_start"])) for run in runs]
    assert most_in_a_window(at_task, 1.0 - BEGIN_TO_TASK) <= 5
    gaps = [
        float(str(r["redis_start"])) - float(str(r["begun_ms"])) / 1000
        for r in runs
        if r["begun_ms"]
    ]
    assert all(-0.001 <= gap < BEGIN_TO_TASK for gap in gaps), gaps
    assert max(begun) - min(begun) >= 4.0  # 25 starts at 5/s take four windows at least
    batched = [float(str(run["redis_start"])) for run in limit_tasks.runs("rated_batched")]
    assert len(batched) == 12 and most_in_a_window(batched, 1.0 - BEGIN_TO_TASK) <= 5


def test_never_more_running_than_the_concurrency_and_keys_are_apart(
    r: redis.Redis, workers: list[Process]
) -> None:
    r.delete(limit_tasks.RUNS)
    for i in range(8):
        limit_tasks.concurrent.delay_for(f"c{i}", 0.4, seconds=0, on_commit=False)
    for key in ("provider:a", "provider:b"):
        for i in range(3):
            limit_tasks.keyed.delay_for(
                f"{key}/{i}", 0.4, seconds=0, limit_key=key, on_commit=False
            )
    wait_for(lambda: len(limit_tasks.runs()) >= 14 and all_settled(r), 60)
    concurrent = limit_tasks.runs("concurrent")
    assert len(concurrent) == 8 and most_at_once(concurrent) == 2  # six could have run
    keyed = limit_tasks.runs("keyed")
    for key in ("provider:a", "provider:b"):
        assert most_at_once([run for run in keyed if str(run["tag"]).startswith(key)]) == 1
    assert most_at_once(keyed) == 2  # each key had its own slot, at the same time


def test_expired_jobs_never_run_and_are_dead(r: redis.Redis, workers: list[Process]) -> None:
    r.delete(limit_tasks.RUNS)
    operations.pause(limit_tasks.QUEUE, "test")
    late = [
        limit_tasks.expiring.delay_for(f"late{i}", seconds=0, expires=0.3, on_commit=False)
        for i in range(5)
    ]
    in_time = [
        limit_tasks.expiring.delay_for(f"ok{i}", seconds=0, on_commit=False) for i in range(5)
    ]
    time.sleep(0.6)
    operations.resume(limit_tasks.QUEUE)
    wait_for(lambda: len(limit_tasks.runs()) >= 5 and all_settled(r), 30)
    time.sleep(0.3)
    assert sorted(str(run["tag"]) for run in limit_tasks.runs()) == [f"ok{i}" for i in range(5)]
    assert {job.id for job in late} == set(r.zrange(Q.dead, 0, -1))
    assert all(r.hget(Q.job(job.id), "why") == "expired" for job in late)
    assert not any(r.exists(Q.job(job.id)) for job in in_time)


def test_nothing_is_lost_when_workers_are_killed_mid_run(
    r: redis.Redis, workers: list[Process], celery_workers: list[Process]
) -> None:
    r.delete(limit_tasks.RUNS)
    tags = [f"k{i}" for i in range(10)]
    for tag in tags:
        limit_tasks.concurrent.delay_for(tag, 0.5, seconds=0, on_commit=False)
    wait_for(lambda: len(limit_tasks.runs()) >= 2, 30)
    celery_workers[0].popen.send_signal(signal.SIGKILL)  # its runs hold slots: reaped
    workers[0].popen.send_signal(signal.SIGKILL)
    celery_workers[0].popen.wait()
    workers[0].popen.wait()
    wait_for(lambda: all_settled(r), 90)
    runs = limit_tasks.runs("concurrent")
    assert {str(run["tag"]) for run in runs} == set(tags)  # each ran (at least once)
    assert most_at_once(runs) <= 2
    assert r.zcard(Q.dead) == 0
