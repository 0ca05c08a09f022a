"""``python -m bench --only tracing``: what one trace across the delay costs (docs/tracing.md).

``delay_for`` one at a time, in turns of a tenth each (a machine that slows down for a
while slows every variant alike), three ways: the tracing hook switched off (as without
OpenTelemetry installed), OpenTelemetry's SDK installed with no active span (the goal: the
same), and every call under an active span (the goal: at most 15 % fewer calls/s), the SDK
sending its spans through a ``BatchSpanProcessor`` to an exporter that drops them (what an
application pays before its exporter's own work), and the same with ``TRACE_SCHEDULING =
"context"`` (the job keeps the active span's context, no span of its own). Then Redis bytes
per scheduled job (``delay_many`` of ``sizes.memory`` jobs with an int argument) without and
with a trace."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from django.conf import settings
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from bench.env import BenchEnv
from bench.report import Figure
from bench.throughput import Sizes, _noop
from delayqueue.producer import api, job_spec


class _Dropped(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _provider() -> TracerProvider:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(_Dropped()))
        trace.set_tracer_provider(provider)
    return provider


@contextmanager
def _hook_off() -> Iterator[None]:
    """The producer's hook as it is without OpenTelemetry installed."""
    hooked = job_spec.scheduling_context
    job_spec.scheduling_context = lambda queue, job_id, task: ""
    try:
        yield
    finally:
        job_spec.scheduling_context = hooked


@contextmanager
def _context_only(tracer: Any) -> Iterator[None]:
    """An active span, with TRACE_SCHEDULING = "context": the job keeps its context, no
    span of its own."""
    with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "TRACE_SCHEDULING": "context"}):
        with tracer.start_as_current_span("request"):
            yield


def _rates(n: int) -> dict[str, float]:
    noop = _noop()
    tracer = _provider().get_tracer("bench")
    ways: dict[str, Callable[[], Any]] = {
        "off": _hook_off,
        "no span": nullcontext,
        "active span": lambda: tracer.start_as_current_span("request"),
        "context only": lambda: _context_only(tracer),
    }
    noop.delay_for(0, seconds=3_600)  # connect, load scripts, remember the queue
    spent = dict.fromkeys(ways, 0.0)
    step = max(1, n // 10)
    for first in range(0, n, step):
        block = range(first, min(n, first + step))
        for name, way in ways.items():
            with way():
                started = time.perf_counter()
                for i in block:
                    noop.delay_for(i, seconds=3_600 + i % 3_600)
                spent[name] += time.perf_counter() - started
    return {name: n / seconds for name, seconds in spent.items()}


def _bytes_per_job(env: BenchEnv, count: int, traced: bool) -> float:
    noop = _noop()
    env.flush()
    noop.delay_for(0, seconds=3_600)
    before = env.used_memory()
    with (
        _provider().get_tracer("bench").start_as_current_span("request")
        if traced
        else (nullcontext())
    ):
        for start in range(0, count, 1_000):
            specs = [
                api.spec(noop, (i,), delay=3_600 + random.random() * 3_600)
                for i in range(start, min(count, start + 1_000))
            ]
            api.delay_many(specs, on_commit=False)
    return (env.used_memory() - before) / count


def tracing(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    env.flush()
    rates = max((_rates(sizes.enqueue) for _ in range(3)), key=lambda r: r["off"])
    plain = _bytes_per_job(env, sizes.memory, traced=False)
    traced = _bytes_per_job(env, sizes.memory, traced=True)
    # a spec with a context is past Redis's hash-max-listpack-value (64): with 256, the specs
    # buckets stay compact listpacks (docs/design.md, "Specs buckets")
    redis_client = env.client()
    default_value = str(
        redis_client.config_get("hash-max-listpack-value")["hash-max-listpack-value"]
    )
    redis_client.config_set("hash-max-listpack-value", 256)
    try:
        plain_256 = _bytes_per_job(env, sizes.memory, traced=False)
        traced_256 = _bytes_per_job(env, sizes.memory, traced=True)
    finally:
        redis_client.config_set("hash-max-listpack-value", default_value)
    env.flush()
    off, quiet, active = rates["off"], rates["no span"], rates["active span"]
    context_only = rates["context only"]
    return [
        Figure("tracing", "delay_for, OpenTelemetry SDK, no active span", quiet, "jobs/s",
               "tracing hook off (as without OpenTelemetry)", off, "≥ 0.97x (noise)",
               quiet >= 0.97 * off),
        Figure("tracing", "delay_for under an active span (a create span each)", active,
               "jobs/s", "tracing hook off (as without OpenTelemetry)", off, "≥ 0.85x",
               active >= 0.85 * off),
        Figure("tracing", "delay_for under an active span, TRACE_SCHEDULING=context",
               context_only, "jobs/s", "tracing hook off (as without OpenTelemetry)", off,
               "≥ 0.85x", context_only >= 0.85 * off),
        Figure("tracing", "Redis bytes per scheduled job with a trace context", traced, "B/job",
               "the same job without", plain, "+ the context (55-56 B + state)"),
        Figure("tracing", "the same, hash-max-listpack-value 256", traced_256, "B/job",
               "the same job without", plain_256, "+ the context (55-56 B + state)"),
    ]  # fmt: skip
