"""Scenarios measured in this process: enqueue, claim, memory and scale."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench import baselines
from bench.env import BROKER_DB, DQ_DB, BenchEnv
from bench.report import Figure
from delayqueue.engine.keys import queue_keys
from delayqueue.producer import api
from delayqueue.worker.claimed import Claimed
from delayqueue.worker.loop import DelayWorker


@dataclass(frozen=True)
class Sizes:
    enqueue: int = 20_000  # delay_for calls (and raw EVALSHAs, Celery countdowns / 4)
    many: int = 200_000  # jobs written by delay_many
    many_batch: int = 1_000
    claim: int = 100_000
    claim_batch: int = 500  # the worker's default CLAIM_SIZE
    dispatch: int = 20_000
    dispatch_workers: tuple[int, ...] = (1, 2, 4)
    end_to_end: int = 5_000
    late_rates: tuple[int, ...] = (50, 1_000)  # jobs/s arriving (50/s: light load)
    late_seconds: float = 10.0
    burst: int = 20_000  # jobs due at one instant (burst), or over spread_s (spread)
    spread_s: tuple[float, float] = (4.0, 15.0)
    late_delays: tuple[float, float] = (1.0, 10.0)
    memory: int = 100_000
    memory_peer: int = 20_000  # jobs of the long-named tasks, beside huey's layout
    memory_celery: int = 10_000
    scale: tuple[int, int] = (1_000, 1_000_000)
    scale_probe: int = 5_000


SMOKE = Sizes(
    enqueue=300, many=2_000, claim=2_000, dispatch=600, dispatch_workers=(1, 2),
    end_to_end=200, late_rates=(200,), late_seconds=1.0, late_delays=(0.2, 1.0),
    burst=300, spread_s=(1.0, 2.0),
    memory=1_000, memory_peer=1_000, memory_celery=200, scale=(1_000, 20_000), scale_probe=300,
)  # fmt: skip

QUEUE = "bench"


def _noop() -> Any:
    from bench.tasks import noop

    return noop


class ClaimOnly(DelayWorker):
    """The delay worker's pass (reap + claim in one round trip, rows decoded), with the
    dispatch left out."""

    claimed = 0

    def dispatch(self, jobs: list[Claimed]) -> None:
        self.claimed += len(jobs)


def fill(count: int, *, due_now: bool = False, batch: int = 1_000) -> None:
    """Schedule ``count`` jobs of the small payload through delay_many, spread over an hour
    (or all due now)."""
    noop = _noop()
    for start in range(0, count, batch):
        specs = [
            api.spec(noop, (i,), delay=0 if due_now else 3_600 + random.random() * 3_600)
            for i in range(start, min(count, start + batch))
        ]
        api.delay_many(specs, on_commit=False)


# ---- 1. enqueue ---------------------------------------------------------------------------


def enqueue(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    noop = _noop()
    env.flush()
    raw, one = _one_at_a_time(noop, baselines.raw_enqueuer(env), sizes.enqueue)

    env.flush()
    zadds, many = _many_in_turns(env, noop, sizes.many, sizes.many_batch)

    env.flush()
    countdown = baselines.celery_countdown_rate(max(100, sizes.enqueue // 4))
    env.flush()
    return [
        Figure("enqueue", "delay_for, one at a time", one, "jobs/s",
               "raw EVALSHA, 1 round trip/job", raw, "≥ 0.95x raw", one >= 0.95 * raw),
        Figure("enqueue", "delay_for, one at a time", one, "jobs/s",
               "Celery apply_async(countdown)", countdown),
        Figure("enqueue", f"delay_many, batches of {sizes.many_batch:,}", many, "jobs/s",
               "raw pipeline of 1,000 ZADDs", zadds, "≥ 0.6x raw", many >= 0.6 * zadds),
    ]  # fmt: skip


def _many_in_turns(env: BenchEnv, task: Any, n: int, batch: int) -> tuple[float, float]:
    """Jobs/s of raw pipelines of 1,000 ZADDs and of ``delay_many`` (``batch`` per call),
    ``n`` of each, in turns of a tenth each (as ``_one_at_a_time``)."""
    calls = [(i,) for i in range(batch)]
    task.delay_many(calls[:2], seconds=3_600)  # connect, load scripts, remember the queue
    spent = {"raw": 0.0, "delay_many": 0.0}
    step = max(batch, n // 10 // batch * batch)
    for first in range(0, n, step):
        count = min(step, n - first)
        spent["raw"] += count / baselines.zadd_pipeline_rate(env, count, flush=False)
        started = time.perf_counter()
        for _ in range(0, count, batch):
            task.delay_many(calls, seconds=3_600)
        spent["delay_many"] += time.perf_counter() - started
    return n / spent["raw"], n / spent["delay_many"]


def _one_at_a_time(task: Any, raw_write: Callable[[int], None], n: int) -> tuple[float, float]:
    """Jobs/s of the raw EVALSHA and of ``delay_for``, ``n`` of each, measured in turns of
    a tenth each: a machine that slows down for a while slows both alike."""
    task.delay_for(0, seconds=3_600)  # connect, load scripts, remember the queue
    spent = {"raw": 0.0, "delay_for": 0.0}
    step = max(1, n // 10)
    for first in range(0, n, step):
        block = range(first, min(n, first + step))
        started = time.perf_counter()
        for i in block:
            raw_write(i)
        spent["raw"] += time.perf_counter() - started
        started = time.perf_counter()
        for i in block:
            task.delay_for(i, seconds=3_600 + i % 3_600)
        spent["delay_for"] += time.perf_counter() - started
    return n / spent["raw"], n / spent["delay_for"]


# ---- 2. claim -----------------------------------------------------------------------------


def claim_rate(count: int, batch: int) -> float:
    worker = ClaimOnly([QUEUE], claim_size=batch)
    started = time.perf_counter()
    while worker.claimed < count:
        before = worker.claimed
        worker.run_pass()
        if worker.claimed == before:
            raise RuntimeError(f"claim stopped at {worker.claimed} of {count} due jobs")
    return count / (time.perf_counter() - started)


def claim(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    env.flush()
    fill(sizes.claim, due_now=True)
    time.sleep(0.01)  # every job is due
    rate = claim_rate(sizes.claim, sizes.claim_batch)
    raw = baselines.move_rate(env, sizes.claim, sizes.claim_batch)
    env.flush()
    return [
        Figure("claim", f"worker pass, batches of {sizes.claim_batch}", rate, "jobs/s",
               f"raw Lua zset->zset move, {sizes.claim_batch}/call", raw,
               "≥ 50,000 jobs/s", rate >= 50_000),
    ]  # fmt: skip


# ---- 5. memory ----------------------------------------------------------------------------


def _bytes_per_job(env: BenchEnv, sizes: Sizes, keyed: bool) -> float:
    """Redis memory per scheduled job: ``sizes.memory`` jobs with an int argument, due in
    1-2 hours, each with a dedupe key or none, written by ``delay_many`` 1,000 at a time."""
    noop = _noop()
    env.flush()
    noop.delay_for(0, seconds=3_600, key="warm" if keyed else None)
    before = env.used_memory()
    for start in range(0, sizes.memory, 1_000):
        specs = [
            api.spec(
                noop,
                (i,),
                delay=3_600 + random.random() * 3_600,
                key=f"order:{i}" if keyed else None,
            )
            for i in range(start, min(sizes.memory, start + 1_000))
        ]
        api.delay_many(specs, on_commit=False)
    return (env.used_memory() - before) / sizes.memory


def memory(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    per_job = _bytes_per_job(env, sizes, keyed=True)
    keyless_per_job = _bytes_per_job(env, sizes, keyed=False)

    env.flush()
    before = env.used_memory()
    baselines.celery_countdown_rate(sizes.memory_celery)
    celery_per_job = (env.used_memory() - before) / (sizes.memory_celery + 1)
    env.flush(DQ_DB, BROKER_DB)
    return [
        Figure("memory", "Redis bytes per scheduled job (int arg + key)", per_job, "B/job",
               "Celery countdown message in the broker", celery_per_job,
               "≤ 350 B/job", per_job <= 350),
        Figure("memory", "Redis bytes per scheduled job (int arg, no key)", keyless_per_job,
               "B/job", "Celery countdown message in the broker", celery_per_job,
               "≤ 220 B/job", keyless_per_job <= 220),
        *_beside_huey(env, sizes.memory_peer),
    ]  # fmt: skip


# Task paths of a real project's length (the peer run's): 44 and 60 characters.
NAMED_TASKS = (
    "shop_project.orders.tasks.close_unpaid_order",
    "shop_project.orders.tasks.close_unpaid_order_and_free_stocks",
)
_named: dict[str, Any] = {}


def _named_task(name: str) -> Any:
    """A delayed task of the bench's queue registered as ``name`` (its jobs never run)."""
    if name not in _named:
        from delayqueue import delayed_task

        def never_run(n: int) -> None:  # pragma: no cover - only scheduled
            raise AssertionError("the memory scenario's jobs are never run")

        _named[name] = delayed_task(queue=QUEUE, name=name)(never_run)
    return _named[name]


def _bytes_written(
    env: BenchEnv, task: Any, n: int, writer: str, keyed: bool
) -> tuple[float, dict[str, Any]]:
    """Redis bytes per job of ``n`` jobs ``task(i)`` due in 1-2 hours, written by
    ``delay_many`` (1,000 per call) or ``delay_for`` (one at a time), each with a dedupe
    key or none; and how Redis encodes the queue's specs buckets then."""
    env.flush()
    task.delay_for(0, seconds=3_600, key="warm" if keyed else None, on_commit=False)
    before = env.used_memory()
    if writer == "delay_for":
        for i in range(n):
            key = f"order:{i}" if keyed else None
            task.delay_for(i, seconds=3_600 + random.random() * 3_600, key=key, on_commit=False)
    else:
        for start in range(0, n, 1_000):
            specs = [
                api.spec(task, (i,), delay=3_600 + random.random() * 3_600,
                         key=f"order:{i}" if keyed else None)
                for i in range(start, min(n, start + 1_000))
            ]  # fmt: skip
            api.delay_many(specs, on_commit=False)
    per_job = (env.used_memory() - before) / n
    client = env.client()
    prefix = queue_keys(QUEUE).spec_prefix
    encodings = Counter(
        client.object("encoding", bucket)
        for bucket in client.scan_iter(match=prefix + "*", count=1_000)
    )
    client.close()
    return per_job, {"bucket_encodings": dict(encodings)}


def _beside_huey(env: BenchEnv, n: int) -> list[Figure]:
    """Bytes per job of tasks with real projects' path lengths, written by delay_many and by
    delay_for, beside huey's layout of the same task in the same Redis: a zset whose members
    are huey's pickled messages (baselines.huey_bytes_per_job)."""
    figures = []
    for name in NAMED_TASKS:
        task = _named_task(name)
        huey, size = baselines.huey_bytes_per_job(env, n, name)
        label = f"huey layout (zset of {size} B pickled messages)"
        for writer in ("delay_many", "delay_for"):
            per_job, seen = _bytes_written(env, task, n, writer, keyed=False)
            figures.append(Figure(
                "memory", f"bytes/job, {len(name)}-char task path, {n:,} by {writer}", per_job,
                "B/job", label, huey, "≤ 185 B/job", per_job <= 185, {"task": name, **seen},
            ))  # fmt: skip
        per_job, seen = _bytes_written(env, task, n, "delay_many", keyed=True)
        figures.append(Figure(
            "memory", f"bytes/job, {len(name)}-char task path + key, {n:,} by delay_many",
            per_job, "B/job", label, huey, detail={"task": name, **seen},
        ))  # fmt: skip
    env.flush()
    return figures


# ---- 6. scale -----------------------------------------------------------------------------


def _enqueue_cost(probe: int) -> float:
    noop = _noop()
    started = time.perf_counter()
    for i in range(probe):
        noop.delay_for(i, seconds=3_600 + random.random() * 3_600)
    return (time.perf_counter() - started) / probe


def _claim_cost(probe: int, batch: int) -> float:
    fill(probe, due_now=True)
    time.sleep(0.01)
    return 1 / claim_rate(probe, batch)


def _best_of(repeats: int, measure: Any) -> float:
    """The lowest of a few runs: the cost with the least noise from other processes."""
    return min(measure() for _ in range(repeats))


def scale(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    small, large = sizes.scale
    costs: dict[int, tuple[float, float, float]] = {}
    for size in (small, large, small):  # small twice: the first run also warms up
        env.flush()
        fill(size, batch=2_000)
        enqueue_cost = _best_of(3, lambda: _enqueue_cost(sizes.scale_probe))
        claim_cost = _best_of(3, lambda: _claim_cost(4 * sizes.scale_probe, sizes.claim_batch))
        raw_rate = baselines.evalsha_rate(env, sizes.scale_probe, prefill=size)
        for _ in range(2):
            raw_rate = max(raw_rate, baselines.evalsha_rate(env, sizes.scale_probe, flush=False))
        before = costs.get(size, (enqueue_cost, claim_cost, 1 / raw_rate))
        costs[size] = (
            min(before[0], enqueue_cost),
            min(before[1], claim_cost),
            min(before[2], 1 / raw_rate),
        )
    env.flush()
    enqueue_ratio = costs[large][0] / costs[small][0]
    claim_ratio = costs[large][1] / costs[small][1]
    raw_ratio = costs[large][2] / costs[small][2]
    label = f"cost at {large:,} / at {small:,} scheduled"
    detail = {str(size): {"enqueue_us": c[0] * 1e6, "claim_us": c[1] * 1e6, "raw_us": c[2] * 1e6}
              for size, c in costs.items()}  # fmt: skip
    return [
        Figure("scale", f"enqueue {label}", enqueue_ratio, "x", "raw EVALSHA, same sizes",
               raw_ratio, "≤ 1.3x", enqueue_ratio <= 1.3, detail),
        Figure("scale", f"claim {label}", claim_ratio, "x", "raw EVALSHA, same sizes",
               raw_ratio, "≤ 1.3x", claim_ratio <= 1.3, detail),
    ]  # fmt: skip
