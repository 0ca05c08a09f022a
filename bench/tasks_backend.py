"""Django's Tasks API on delayqueue (``--only tasks``): ``Task.enqueue`` through the backend
against ``delay_for`` in the same run (goal ≥ 0.8x), and lateness from ``run_after`` to the
task's start against ``delay_until``'s from its due time and Celery's own eta, at 50 jobs/s
on the same Celery worker (goal: delay_for's at light load, p99 at most eta's; none early)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

from bench.env import BenchEnv
from bench.report import Figure
from bench.throughput import Sizes
from bench.timing import _lateness, _produce, eta_at, percentile

ROUNDS = 5


def _rate(count: int, call: object) -> float:
    started = time.perf_counter()
    for i in range(count):
        call(i)  # type: ignore[operator]
    return count / (time.perf_counter() - started)


def tasks(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    from bench import django_tasks
    from bench.tasks import noop, stamp

    smoke = sizes.late_seconds < 5
    count = 300 if smoke else 5_000
    later = datetime.now(UTC) + timedelta(hours=1)
    task = django_tasks.noop_task.using(run_after=later)
    ours, theirs = [], []
    # Interleaved rounds, each side's best: on a shared 2-core machine a round of either side
    # may meet a neighbour's burst (3 rounds gave 0.74x to 0.87x over five runs).
    for _ in range(ROUNDS):
        env.flush()
        theirs.append(_rate(count, lambda i: noop.delay_for(i, hours=1, on_commit=False)))
        env.flush()
        ours.append(_rate(count, task.enqueue))
    env.flush()
    figures = [
        Figure("tasks", f"Task.enqueue(run_after=...) through the backend, {count:,} calls",
               max(ours), "calls/s", "delay_for, same run", max(theirs), "≥ 0.8x",
               max(ours) >= 0.8 * max(theirs), {"rounds": ROUNDS})
    ]  # fmt: skip
    env.start_celery()
    children = env.start_delay_workers(1, "bench")
    rate, timeout = 50, sizes.late_delays[1] + 120
    try:

        def enqueue_task(due_ms: float) -> None:
            # a whole millisecond, as delay_until's eta is (run_after's fraction of one would
            # be rounded up: the task never starts before it)
            due = math.ceil(due_ms)
            run_after = datetime.fromtimestamp(due / 1000, tz=UTC)
            django_tasks.stamp_task.using(run_after=run_after).enqueue(due)

        total = _produce(sizes, rate, enqueue_task)
        late_task = _lateness(env, total, timeout)
        total = _produce(
            sizes,
            rate,
            lambda due_ms: stamp.delay_until(int(due_ms), eta=eta_at(due_ms), on_commit=False),
        )
        late_delay = _lateness(env, total, timeout)
    finally:
        env.stop(children)
    env.flush()
    # Celery's own eta on the same worker, no delay worker running: the lateness scenario's
    # light-load goal for delay_for (p99 at most eta's) is the Django task's goal too
    total = _produce(
        sizes, rate, lambda due_ms: stamp.apply_async(args=(int(due_ms),), eta=eta_at(due_ms))
    )
    late_eta = _lateness(env, total, timeout)
    env.flush()
    for name, p in (("p50", 50.0), ("p99", 99.0)):
        figures.append(
            Figure("tasks", f"lateness {name}, run_after -> task start, {rate} jobs/s",
                   percentile(late_task, p), "ms", "delay_until's due -> start, same run",
                   percentile(late_delay, p))
        )  # fmt: skip
    task_p99, eta_p99 = percentile(late_task, 99.0), percentile(late_eta, 99.0)
    figures.append(
        Figure("tasks", f"lateness p99, run_after -> task start, {rate} jobs/s", task_p99, "ms",
               "Celery eta's due -> start, same run", eta_p99, "≤ eta's p99",
               task_p99 <= eta_p99, {"eta_p50": percentile(late_eta, 50.0)})
    )  # fmt: skip
    figures.append(
        Figure("tasks", "Django tasks started before run_after", sum(v < 0 for v in late_task),
               "tasks", "delay_until: started before due", sum(v < 0 for v in late_delay),
               "0", all(v >= 0 for v in late_task))
    )  # fmt: skip
    return figures
