"""Prometheus metrics, scraped and parsed with prometheus_client's parser after real jobs
ran: the Django view, ``run_delay_worker --metrics-port``, a prefork Celery worker in
multiprocess mode; the Grafana dashboard's names; ``run_delay_worker --health-file``."""

from __future__ import annotations

import json
import re
import socket
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import Client, override_settings
from django.urls import path
from prometheus_client.parser import text_string_to_metric_families

from delayqueue import signals
from delayqueue.engine.keys import global_keys, new_job_id, queue_keys
from delayqueue.observability.metrics import metrics_view
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.celery_apps import parked_broker_url
from tests.support.processes import ROOT, Process, child_env, run_python
from tests.support.redis_server import free_port
from tests.support.waiting import wait_for

Q = queue_keys("tests")
DASHBOARD = ROOT / "docs" / "grafana-dashboard.json"

urlpatterns = [path("metrics/", metrics_view)]  # this module is the URLconf of view tests


class Scrape:
    """One scrape, parsed."""

    def __init__(self, text: str) -> None:
        self.families = list(text_string_to_metric_families(text))
        self.samples = [sample for family in self.families for sample in family.samples]

    def total(self, name: str, **labels: str) -> float:
        """The sum of the samples called ``name`` with these labels (0 when none)."""
        return sum(
            s.value
            for s in self.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    def has(self, name: str, **labels: str) -> bool:
        return any(
            s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
            for s in self.samples
        )

    def names(self) -> set[str]:
        """Every sample name, and the sample names of every family declared (a histogram
        nothing has observed yet declares its family, without samples)."""
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_count", "_sum"),
        }
        declared = {
            f.name + suffix for f in self.families for suffix in suffixes.get(f.type, ("",))
        }
        return {s.name for s in self.samples} | declared


def scrape_view() -> Scrape:
    with override_settings(ROOT_URLCONF=__name__):
        response = Client().get("/metrics/")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return Scrape(response.content.decode())


def scrape_port(port: int) -> Scrape:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return Scrape(response.read().decode())


def redis_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_view_serves_this_process_counters_and_the_queue_gauges(
    r: redis.Redis, parked_celery: Celery
) -> None:
    before = scrape_view()
    due = jobs.record.delay_for("now", seconds=0, on_commit=False)
    unknown = new_job_id()  # (a real id: one that is not is buried for that alone)
    r.hset(Q.job(unknown), mapping={"task": "no.such.task", "args": "[]", "max": "3"})
    r.zadd(Q.scheduled, {unknown: 0})
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()  # due: in flight; unknown: dead
    jobs.record.delay_for("later", seconds=60, on_commit=False)
    overdue = jobs.record.delay_for("overdue", seconds=60, on_commit=False)
    r.zadd(Q.scheduled, {overdue.id: redis_ms(r) - 5_000})  # 5 s past its due time
    r.set(queue_keys("orders").paused, "1")
    r.sadd(global_keys().queues, "orders")

    after = scrape_view()
    assert after.total("delayqueue_redis_up") == 1
    assert after.total("delayqueue_queue_scheduled", queue="tests") == 2
    assert after.total("delayqueue_queue_inflight", queue="tests") == 1
    assert after.total("delayqueue_queue_dead", queue="tests") == 1
    assert 5 <= after.total("delayqueue_queue_oldest_overdue_seconds", queue="tests") < 30
    assert after.total("delayqueue_queue_paused", queue="tests") == 0
    assert after.total("delayqueue_queue_paused", queue="orders") == 1
    assert after.total("delayqueue_queue_scheduled", queue="orders") == 0
    assert after.total("delayqueue_queue_oldest_overdue_seconds", queue="orders") == 0
    assert after.has("delayqueue_delay_workers")

    def delta(name: str, **labels: str) -> float:
        return after.total(name, **labels) - before.total(name, **labels)

    assert delta("delayqueue_jobs_scheduled_total", queue="tests") == 3
    assert delta("delayqueue_jobs_dispatched_total", queue="tests") == 1
    assert delta("delayqueue_jobs_dead_total", queue="tests", cause="buried") == 1
    assert r.zscore(Q.inflight, due.id) is not None


def test_view_says_redis_is_down_instead_of_failing(r: redis.Redis) -> None:
    down = {**settings.DELAYQUEUE, "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}
    with override_settings(DELAYQUEUE=down):
        scrape = scrape_view()
    assert scrape.total("delayqueue_redis_up") == 0
    assert not scrape.has("delayqueue_queue_scheduled")


def test_delay_worker_serves_metrics_and_the_dashboard_uses_only_real_names(
    r: redis.Redis, celery_worker: Process, delay_worker: Callable[..., Process]
) -> None:
    port = free_port()
    delay_worker("--queues", "tests", "--metrics-port", str(port))
    for i in range(3):
        jobs.record.delay_for(f"m{i}", seconds=0.1, on_commit=False)
    wait_for(lambda: len(jobs.ran("record")) == 3)
    wait_for(lambda: r.zcard(Q.inflight) == 0)
    jobs.record.delay_for("later", seconds=60, on_commit=False)

    scrape = scrape_port(port)
    assert scrape.total("delayqueue_jobs_dispatched_total", queue="tests") == 3
    assert scrape.total("delayqueue_queue_scheduled", queue="tests") == 1
    assert scrape.total("delayqueue_queue_inflight", queue="tests") == 0
    assert scrape.total("delayqueue_delay_workers") == 1
    assert scrape.total("delayqueue_redis_up") == 1

    dashboard = json.loads(DASHBOARD.read_text())
    used = set(re.findall(r"delayqueue_[a-z_]+", json.dumps(dashboard)))
    assert len(used) >= 10
    missing = used - (scrape.names() | scrape_view().names())
    assert not missing, f"the dashboard uses names no scrape has: {sorted(missing)}"


@pytest.fixture
def own_broker() -> Iterator[str]:
    """A broker database of this test's own (the session's Celery worker does not consume
    it), emptied before and after."""
    url = parked_broker_url().rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(url).flushdb()
    yield url
    redis.Redis.from_url(url).flushdb()


def test_celery_figures_survive_the_prefork_pool_in_multiprocess_mode(
    r: redis.Redis, tmp_path: Path, own_broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefork Celery worker whose children are replaced every 2 tasks, writing into
    PROMETHEUS_MULTIPROC_DIR; the view reading that directory counts every job."""
    multiproc = tmp_path / "prometheus"
    multiproc.mkdir()
    env = child_env(DQ_TEST_BROKER_URL=own_broker, PROMETHEUS_MULTIPROC_DIR=str(multiproc))
    celery = Process(
        "celery",
        [sys.executable, "-m", "celery", "-A", "orders_demo", "worker", "-l", "info",
         "-c", "2", "--max-tasks-per-child", "2", "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        tmp_path / "celery.log",
        env,
    )  # fmt: skip
    port = free_port()
    worker_env = {k: v for k, v in env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    delay = Process(
        "delay worker",
        [sys.executable, "manage.py", "run_delay_worker", "--queues", "tests",
         "--metrics-port", str(port)],
        tmp_path / "delay-worker.log",
        worker_env,
    )  # fmt: skip
    try:
        wait_for(lambda: "ready." in celery.output() or not celery.alive(), 60)
        assert celery.alive(), celery.output()
        wait_for(lambda: "starting" in delay.output() or not delay.alive(), 30)
        assert delay.alive(), delay.output()

        for i in range(6):
            jobs.record.delay_for(f"p{i}", seconds=0, on_commit=False)
        failing = jobs.always_fails.delay_for("p", seconds=0, on_commit=False)  # 3 attempts
        wait_for(lambda: len(jobs.ran("record")) == 6 and len(jobs.ran("fail")) == 3, 60)
        wait_for(lambda: r.zscore(Q.dead, failing.id) is not None and r.zcard(Q.inflight) == 0)

        # the children that ran them are gone (recycled every 2 tasks): their figures are not
        pids = {run["pid"] for run in jobs.ran()}
        assert len(pids) >= 3 and celery.pid not in pids

        def counted() -> Scrape | None:
            with monkeypatch.context() as patch:
                patch.setenv("PROMETHEUS_MULTIPROC_DIR", str(multiproc))
                scrape = scrape_view()
            done = scrape.total("delayqueue_jobs_succeeded_total", queue="tests") == 6
            return scrape if done and scrape.total("delayqueue_jobs_dead_total") == 1 else None

        scrape = wait_for(counted, 15)
        assert scrape.total("delayqueue_jobs_started_total", queue="tests") == 9
        assert scrape.total("delayqueue_jobs_retried_total", queue="tests") == 2
        assert scrape.total("delayqueue_jobs_dead_total", queue="tests", cause="failed") == 1
        assert scrape.total("delayqueue_run_seconds_count", queue="tests") == 9
        assert scrape.total("delayqueue_run_seconds_count", task="tests.support.jobs.record") == 6
        assert scrape.total("delayqueue_start_wait_seconds_count", queue="tests") == 9
        # every start knows its due time (the dq_due header the claim reply made possible)
        assert scrape.total("delayqueue_start_lateness_seconds_count", queue="tests") == 9
        assert scrape.total("delayqueue_queue_dead", queue="tests") == 1  # read from Redis
        assert not scrape.has("delayqueue_jobs_dispatched_total")  # the delay worker's own

        from_worker = scrape_port(port)
        assert from_worker.total("delayqueue_jobs_dispatched_total", queue="tests") == 9
        assert from_worker.total("delayqueue_dispatch_lateness_seconds_count", queue="tests") == 9
        assert not from_worker.has("delayqueue_jobs_started_total")
    finally:
        delay.stop()
        celery.stop()


def test_health_file_is_touched_while_the_worker_runs(
    r: redis.Redis, tmp_path: Path, delay_worker: Callable[..., Process]
) -> None:
    health = tmp_path / "alive"
    delay_worker("--queues", "tests", "--health-file", str(health))
    wait_for(health.exists, 10)
    first = health.stat().st_mtime_ns
    wait_for(lambda: health.stat().st_mtime_ns > first, 10)  # passes at least every 2 s


def test_health_file_is_touched_by_a_pass_at_most_every_second(
    r: redis.Redis, tmp_path: Path, parked_celery: Celery
) -> None:
    health = tmp_path / "alive"
    worker = DelayWorker(["tests"], celery_app=parked_celery, health_file=health)
    worker.run(once=True)
    assert health.exists()
    touched: list[Any] = []
    worker.health_file = _Spy(health, touched)  # type: ignore[assignment]
    for _ in range(5):
        worker.run(once=True)
    assert touched == []  # within a second of the last touch
    worker._health_touched -= 1.0
    worker.run(once=True)
    assert len(touched) == 1


class _Spy:
    def __init__(self, path: Path, calls: list[Any]) -> None:
        self.path, self.calls = path, calls

    def touch(self) -> None:
        self.calls.append(1)
        self.path.touch()


def test_metrics_port_that_is_taken_or_invalid_is_a_command_error(r: redis.Redis) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match="cannot serve metrics"):
            call_command(
                "run_delay_worker", "--once", "--metrics-port", str(port),
                "--metrics-address", "127.0.0.1",
            )  # fmt: skip
    with pytest.raises(CommandError, match="not a TCP port"):
        call_command("run_delay_worker", "--once", "--metrics-port", "0")


@pytest.mark.parametrize("multiprocess", [False, True])
def test_a_process_serving_no_metrics_counts_nothing(tmp_path: Path, multiprocess: bool) -> None:
    """Without the view, --metrics-port or a multiprocess directory, the signals have no
    receiver (sending costs nothing); in multiprocess mode every process counts."""
    extra = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)} if multiprocess else {}
    code = (
        "import django; django.setup(); import delayqueue.producer.api, delayqueue.worker.loop; "
        "from delayqueue import signals; "
        "print(sum(len(s.receivers) for s in signals.ALL.values()))"
    )
    done = run_python(code, timeout=60, **extra)
    assert int(done.stdout.split()[-1]) == (len(signals.ALL) if multiprocess else 0)
