"""Scenarios with child processes: dispatch (delay workers -> Celery broker) and lateness
(due time -> Celery task start), each against plain Celery on the same Redis."""

from __future__ import annotations

import random
import time
from typing import Any

from bench.baselines import eta_at
from bench.env import BROKER_DB, BenchEnv, wait_for
from bench.report import Figure
from bench.throughput import Sizes
from delayqueue.engine.keys import queue_keys
from delayqueue.producer import api
from delayqueue.services import operations

DISPATCH_QUEUE = "bench-dispatch"


def _fill_paused(queue: str, task: Any, count: int) -> None:
    """A backlog of ``count`` due jobs on a paused queue."""
    operations.pause(queue, "benchmark backlog")
    for start in range(0, count, 1_000):
        specs = [
            api.spec(task, (i,), delay=0, queue=queue)
            for i in range(start, min(count, start + 1_000))
        ]
        api.delay_many(specs, on_commit=False)


def dispatch_rate(env: BenchEnv, workers: int, count: int, mode: str | None = None) -> float:
    """Jobs/s from resuming a paused backlog until every message is on the broker's list
    (no Celery worker consumes ``bench-sink``)."""
    from bench.tasks import sink

    env.flush()
    _fill_paused(DISPATCH_QUEUE, sink, count)
    extra = {"BENCH_DISPATCH_MODE": mode} if mode else {}
    children = env.start_delay_workers(workers, DISPATCH_QUEUE, **extra)
    broker = env.client(BROKER_DB)
    try:
        started = time.perf_counter()
        operations.resume(DISPATCH_QUEUE)
        wait_for(lambda: broker.llen("bench-sink") >= count, 600, "the dispatch of the backlog")
        return count / (time.perf_counter() - started)
    finally:
        env.stop(children)


def end_to_end_rate(env: BenchEnv, count: int) -> tuple[float, float]:
    """Jobs/s from resuming a backlog until every job ran and was acked, with one delay worker
    and the Celery worker; and plain Celery's ``delay()`` of as many tasks, same worker."""
    from bench.tasks import RAN, noop

    env.start_celery()
    env.flush()
    _fill_paused(DISPATCH_QUEUE, noop, count)
    keys = queue_keys(DISPATCH_QUEUE)
    redis = env.client()
    children = env.start_delay_workers(1, DISPATCH_QUEUE)
    try:
        started = time.perf_counter()
        operations.resume(DISPATCH_QUEUE)
        wait_for(
            lambda: (
                int(redis.get(RAN) or 0) >= count
                and redis.zcard(keys.inflight) == 0
                and redis.zcard(keys.scheduled) == 0
            ),
            600,
            "every job's run and ack",
        )
        delayqueue_rate = count / (time.perf_counter() - started)
    finally:
        env.stop(children)

    redis.delete(RAN)
    started = time.perf_counter()
    for i in range(count):
        noop.delay(i)
    wait_for(lambda: int(redis.get(RAN) or 0) >= count, 600, "the plain Celery tasks' runs")
    return delayqueue_rate, count / (time.perf_counter() - started)


def dispatch(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    rates = {n: dispatch_rate(env, n, sizes.dispatch) for n in sizes.dispatch_workers}
    send_task = dispatch_rate(env, 1, min(sizes.dispatch, 5_000), mode="send_task")
    figures = [
        Figure("dispatch", f"{n} run_delay_worker process{'es' if n > 1 else ''} -> broker",
               rate, "jobs/s", "1 process, Celery send_task", send_task,
               "≥ 3,000 jobs/s" if n == 1 else "scales", rate >= 3_000 if n == 1 else None)
        for n, rate in rates.items()
    ]  # fmt: skip
    e2e, celery = end_to_end_rate(env, sizes.end_to_end)
    figures.append(
        Figure("dispatch", "end to end: due -> run -> acked (1 delay worker)",
               e2e, "jobs/s", "plain Celery delay(), same worker", celery,
               detail={"jobs": sizes.end_to_end, "celery_worker": env.celery_config.describe()})
    )  # fmt: skip
    return figures


# ---- 4. lateness --------------------------------------------------------------------------


def _produce(sizes: Sizes, rate: int, schedule: Any) -> int:
    """Schedule jobs at ``rate`` per second for ``late_seconds``, each due ``late_delays``
    from now; ``schedule(due_ms)`` writes one. Returns how many."""
    total = int(rate * sizes.late_seconds)
    low, high = sizes.late_delays
    started = time.perf_counter()
    for i in range(total):
        ahead = started + i / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        schedule(time.time() * 1000 + random.uniform(low, high) * 1000)
    return total


def _lateness(env: BenchEnv, total: int, timeout: float) -> list[float]:
    from bench.tasks import LATENESS

    redis = env.client()
    wait_for(lambda: redis.llen(LATENESS) >= total, timeout, "every lateness job's run", 0.05)
    late = []
    for row in redis.lrange(LATENESS, 0, -1):
        due, started = row.split()
        late.append(float(started) - float(due))
    redis.delete(LATENESS)
    return sorted(late)


def percentile(values: list[float], p: float) -> float:
    index = min(len(values) - 1, max(0, round(p / 100 * len(values) + 0.5) - 1))
    return values[index]


def lateness(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    figures: list[Figure] = []
    for rate in sizes.late_rates:
        figures += lateness_at(env, sizes, rate)
    return figures


def lateness_at(env: BenchEnv, sizes: Sizes, rate: int) -> list[Figure]:
    """Due -> task start of jobs arriving at ``rate``/s, delayqueue then Celery's eta, on the
    same Celery worker."""
    from bench.tasks import stamp

    env.start_celery()
    env.flush()
    timeout = sizes.late_delays[1] + 300
    children = env.start_delay_workers(1, "bench")
    try:
        total = _produce(
            sizes,
            rate,
            lambda due_ms: stamp.delay_until(int(due_ms), eta=eta_at(due_ms), on_commit=False),
        )
        ours = _lateness(env, total, timeout)
    finally:
        env.stop(children)
    env.flush()
    total = _produce(
        sizes, rate, lambda due_ms: stamp.apply_async(args=(int(due_ms),), eta=eta_at(due_ms))
    )
    celery = _lateness(env, total, timeout)
    env.flush()

    figures = []
    early, celery_early = sum(1 for v in ours if v < 0), sum(1 for v in celery if v < 0)
    detail: dict[str, object] = {
        "jobs": total,
        "rate": rate,
        "delays_s": sizes.late_delays,
        "celery_worker": env.celery_config.describe(),
        "early": early,
        "celery_early": celery_early,
    }
    light = rate == min(sizes.late_rates)  # light load: the goal is Celery eta's own p99
    for name, p in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0), ("max", 100.0)):
        value, eta = percentile(ours, p), percentile(celery, p)
        goal, met = (
            ("", None)
            if name != "p99"
            else (("≤ eta's p99", value <= eta) if light else ("≤ 10 ms", value <= 10))
        )
        figures.append(
            Figure("lateness", f"{name}, due -> task start, {rate:,} jobs/s arriving",
                   value, "ms", "Celery countdown/eta", eta, goal, met,
                   detail if name == "p50" else {})
        )  # fmt: skip
    # DISPATCH_AHEAD hands jobs over before their due time: none may start before it.
    figures.append(
        Figure("lateness", f"jobs started at or after their due time, {rate:,} jobs/s arriving",
               len(ours) - early, "jobs", "Celery countdown/eta", len(celery) - celery_early,
               f"all {len(ours):,}", early == 0)
    )  # fmt: skip
    return figures
