"""What the tracing tests share: the test process's OpenTelemetry SDK (spans kept in
memory), and a Celery worker and a delay worker on a broker of their own, each with an SDK
that writes its spans to a folder (tests/support/telemetry.py)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.support.celery_apps import parked_broker_url
from tests.support.processes import Process, child_env
from tests.support.telemetry import read_spans
from tests.support.waiting import wait_for

_exporter = InMemorySpanExporter()


@pytest.fixture
def spans_here() -> Iterator[InMemorySpanExporter]:
    """The test process's spans (an SDK set once per process: OpenTelemetry allows one)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.fixture
def own_broker() -> Iterator[str]:
    """A broker database of the test's own: the session's Celery worker does not consume it."""
    url = parked_broker_url().rsplit("/", 1)[0] + "/4"
    redis.Redis.from_url(url).flushdb()
    yield url
    redis.Redis.from_url(url).flushdb()


@dataclass
class Traced:
    spans_dir: Path
    processes: list[Process]

    def spans(self) -> list[dict[str, Any]]:
        return read_spans(self.spans_dir)


@pytest.fixture
def traced_workers(tmp_path: Path, own_broker: str) -> Iterator[Callable[..., Traced]]:
    """``start(celery_instrumented, delay_workers=1, **env)``: a Celery worker (prefork, 2
    processes) and delay workers on ``own_broker``, every one with the SDK."""
    started: list[Process] = []

    def start(celery_instrumented: bool = False, delay_workers: int = 1, **extra: str) -> Traced:
        spans_dir = tmp_path / "spans"
        spans_dir.mkdir(exist_ok=True)
        env = child_env(
            DQ_TEST_BROKER_URL=own_broker,
            DQ_TEST_OTEL_DIR=str(spans_dir),
            DQ_TEST_OTEL_CELERY="1" if celery_instrumented else "0",
            **extra,
        )
        celery = Process(
            "celery",
            [sys.executable, "-m", "celery", "-A", "orders_demo", "worker", "-l", "info",
             "-c", "2", "--without-gossip", "--without-mingle", "--without-heartbeat"],
            tmp_path / "celery.log",
            env,
        )  # fmt: skip
        started.append(celery)
        delays = []
        for index in range(delay_workers):
            delay = Process(
                "delay worker",
                [sys.executable, "manage.py", "run_delay_worker", "-v", "2", "--queues", "tests"],
                tmp_path / f"delay-worker-{index}.log",
                env,
            )
            started.append(delay)
            delays.append(delay)
        wait_for(lambda: "ready." in celery.output() or not celery.alive(), 60)
        assert celery.alive(), celery.output()
        for delay in delays:
            wait_for(lambda d=delay: "starting" in d.output() or not d.alive(), 30)  # type: ignore[misc]
            assert delay.alive(), delay.output()
        return Traced(spans_dir, started)

    yield start
    for process in started:
        process.stop()
