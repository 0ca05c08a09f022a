"""``python -m bench --only tracing``: what one trace across the delay costs (docs/tracing.md).

Four ways, in turns of a tenth each (a machine that slows down for a while slows every way
alike), in one run: the tracing hook switched off (as without OpenTelemetry installed),
OpenTelemetry's SDK installed with no active span (the goal: the same), and every call under
an active span with ``TRACE_SCHEDULING = "context"`` (the default: the job keeps the active
span's context) and with ``"span"`` (a ``create`` span per job): the goal, at most 15 % fewer
calls/s than the hook off. The SDK sends its spans through a ``BatchSpanProcessor`` to an
exporter that drops them (what an application pays before its exporter's own work). Each
for ``delay_for`` one at a time and for ``task.delay_many`` of 100 calls (per job), by the
clock and by this process's CPU time (all its threads: the span processor's too), which a
busy machine disturbs less; each the median of ten turns. Beside them, in the same turns,
what the SDK's span costs by itself (``tracer.start_span(...).end()``, with the ``create``
span's attributes, the same SDK) and what the producer's hook costs in each mode: which part
of the ``"span"`` mode's cost is the SDK's and which is delayqueue's.

Then Redis bytes: per scheduled job (``delay_many`` of ``sizes.memory`` jobs with an int
argument, ``used_memory``), and ``MEMORY USAGE`` of a claimed job's hash, without and with a
trace context."""

from __future__ import annotations

import gc
import random
import statistics
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
from bench.throughput import QUEUE, ClaimOnly, Sizes, _noop
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.integrations import otel
from delayqueue.producer import api, job_spec

MANY = 100  # calls per task.delay_many


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
def _active(tracer: Any, mode: str) -> Iterator[None]:
    """An active span, with TRACE_SCHEDULING = ``mode``."""
    with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "TRACE_SCHEDULING": mode}):
        with tracer.start_as_current_span("request"):
            yield


WAYS = ("no SDK", "SDK, no span", "context", "span")


def _ways(tracer: Any) -> dict[str, Callable[[], Any]]:
    return {
        "no SDK": _hook_off,
        "SDK, no span": nullcontext,
        "context": lambda: _active(tracer, "context"),
        "span": lambda: _active(tracer, "span"),
    }


def _loops(tracer: Any) -> dict[str, tuple[Callable[[], Any], Callable[[range], int]]]:
    """name -> (the way it runs in, a loop over a block: the jobs or spans it made)."""
    noop = _noop()
    job_id, task = new_job_id(), noop.name
    attributes = otel._create_attributes(QUEUE, job_id, task)

    def delay_for(block: range) -> int:
        for i in block:
            noop.delay_for(i, seconds=3_600 + i % 3_600)
        return len(block)

    def delay_many(block: range) -> int:
        made = 0
        for first in range(block.start, block.stop, MANY):
            calls = [(i,) for i in range(first, min(block.stop, first + MANY))]
            noop.delay_many(calls, seconds=3_600 + first % 3_600)
            made += len(calls)
        return made

    def bare_span(block: range) -> int:
        for _ in block:
            tracer.start_span(f"create {QUEUE}", kind=trace.SpanKind.PRODUCER,
                              attributes=attributes).end()  # fmt: skip
        return len(block)

    def hook(block: range) -> int:
        for _ in block:
            otel.scheduling_context(QUEUE, job_id, task)
        return len(block)

    loops: dict[str, tuple[Callable[[], Any], Callable[[range], int]]] = {}
    ways = _ways(tracer)
    for way in WAYS:
        loops[f"delay_for|{way}"] = (ways[way], delay_for)
    for way in WAYS:
        loops[f"delay_many|{way}"] = (ways[way], delay_many)
    loops["bare SDK span"] = (nullcontext, bare_span)
    loops["hook|context"] = (ways["context"], hook)
    loops["hook|span"] = (ways["span"], hook)
    return loops


def _timings(n: int, tracer: Any) -> dict[str, tuple[float, float]]:
    """name -> (µs per job by the clock, µs of this process's CPU per job): the median of
    ten turns of ``n / 10`` jobs, each turn running every loop once, in a shuffled order
    (the freed memory of a loop that made spans slows the loop after it: each way comes
    after one of those in some turns); each loop timed up to its own spans exported, after
    the garbage of the loop before was collected."""
    provider = _provider()
    _noop().delay_for(0, seconds=3_600)  # connect, load scripts, remember the queue
    loops = _loops(tracer)
    for way, loop in loops.values():  # a first turn untimed: every cache warm
        with way():
            loop(range(MANY))
    turns: dict[str, list[tuple[float, float]]] = {name: [] for name in loops}
    names = list(loops)
    step = max(MANY, n // 10)
    for turn, first in enumerate(range(0, n, step)):
        block = range(first, min(n, first + step))
        random.Random(turn).shuffle(names)  # (the loop after a span-making one pays for it)
        for name in names:
            way, loop = loops[name]
            gc.collect()  # (what the loop before left to collect is not this loop's)
            with way():
                started, used = time.perf_counter(), time.process_time()
                made = loop(block)
                provider.force_flush()  # its own spans exported, by the loop that made them
                wall = time.perf_counter() - started
                cpu = time.process_time() - used
            turns[name].append((wall / made * 1e6, cpu / made * 1e6))
    return {
        name: (statistics.median(w for w, _ in found), statistics.median(c for _, c in found))
        for name, found in turns.items()
    }


def _bytes_per_job(env: BenchEnv, count: int, traced: bool) -> float:
    noop = _noop()
    env.flush()
    noop.delay_for(0, seconds=3_600)
    before = env.used_memory()
    with _active(_provider().get_tracer("bench"), "context") if traced else nullcontext():
        for start in range(0, count, 1_000):
            specs = [
                api.spec(noop, (i,), delay=3_600 + random.random() * 3_600)
                for i in range(start, min(count, start + 1_000))
            ]
            api.delay_many(specs, on_commit=False)
    return (env.used_memory() - before) / count


def _claimed_hash_bytes(env: BenchEnv, count: int, traced: bool) -> float:
    """MEMORY USAGE of a claimed job's hash (in flight: its spec unpacked, the trace context
    its ``tc`` field), the mean of ``count`` jobs."""
    noop = _noop()
    env.flush()
    with _active(_provider().get_tracer("bench"), "context") if traced else nullcontext():
        jobs = noop.delay_many([(i,) for i in range(count)], seconds=0, on_commit=False)
    time.sleep(0.01)  # every job is due
    worker = ClaimOnly([QUEUE], claim_size=500)
    while worker.claimed < count:
        worker.run_pass()
    redis_client = env.client()
    keys = queue_keys(QUEUE)
    sizes = [redis_client.memory_usage(keys.job(job.id), samples=0) or 0 for job in jobs]
    env.flush()
    return sum(sizes) / len(sizes)


def _figures(t: dict[str, tuple[float, float]]) -> list[Figure]:
    figures = []
    for call in ("delay_for", "delay_many"):
        (off_wall, off_cpu) = t[f"{call}|no SDK"]
        measure = "delay_for" if call == "delay_for" else f"task.delay_many of {MANY}, per job"
        goals = {"SDK, no span": 0.97, "context": 0.85, "span": 0.85}
        for way, floor in goals.items():
            wall, cpu = t[f"{call}|{way}"]
            label = {
                "SDK, no span": "OpenTelemetry SDK, no active span",
                "context": "active span, TRACE_SCHEDULING=context (default)",
                "span": "active span, TRACE_SCHEDULING=span (a create span each)",
            }[way]
            figures += [
                Figure("tracing", f"{measure}, {label}", 1e6 / wall, "jobs/s",
                       "hook off (as without OpenTelemetry)", 1e6 / off_wall,
                       f"≥ {floor:.2f}x" + (" (noise)" if floor > 0.9 else ""),
                       off_wall / wall >= floor, {"us_per_job": wall}),
                Figure("tracing", "  the same, CPU µs per job", cpu, "µs CPU",
                       "hook off", off_cpu, detail={"added_us": cpu - off_cpu}),
            ]  # fmt: skip
    bare_wall, bare_cpu = t["bare SDK span"]
    off_wall, off_cpu = t["delay_for|no SDK"]
    figures.append(
        Figure(
            "tracing",
            "the SDK's span alone (start_span + end, 5 attributes), CPU",
            bare_cpu,
            "µs CPU",
            "a delay_for's, hook off",
            off_cpu,
            "(≤ 0.15x would fit the goal)",
            detail={"wall_us": bare_wall, "delay_for_wall_us": off_wall},
        )  # fmt: skip
    )
    for mode in ("context", "span"):
        wall, cpu = t[f"hook|{mode}"]
        figures.append(
            Figure("tracing", f"the producer's hook alone, TRACE_SCHEDULING={mode}, CPU", cpu,
                   "µs CPU", "the SDK's span alone", bare_cpu,
                   detail={"wall_us": wall,
                           "ours_us": cpu - (bare_cpu if mode == "span" else 0)})
        )  # fmt: skip
    return figures


def tracing(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    env.flush()
    tracer = _provider().get_tracer("bench")
    timings = _timings(sizes.enqueue, tracer)
    env.flush()
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
    claimed = min(sizes.memory, 2_000)
    hash_plain = _claimed_hash_bytes(env, claimed, traced=False)
    hash_traced = _claimed_hash_bytes(env, claimed, traced=True)
    env.flush()
    return [
        *_figures(timings),
        Figure("tracing", "Redis bytes per scheduled job with a trace context", traced, "B/job",
               "the same job without", plain, "+ the context (55-56 B + state)"),
        Figure("tracing", "the same, hash-max-listpack-value 256", traced_256, "B/job",
               "the same job without", plain_256, "+ the context (55-56 B + state)"),
        Figure("tracing", "MEMORY USAGE of a claimed job's hash with a trace context",
               hash_traced, "B", "the same job's without", hash_plain,
               "+ the context (55 B + field)"),
    ]  # fmt: skip
