"""What a Django task's job costs the Celery side (``--only tasks-load``): the same body
(append one line to a Redis list on a connection the worker process keeps) as a job of
``delay_until`` and as a Django task enqueued through the backend (``Task.using(run_after=
...).enqueue(...)``), each beside Celery's own ``countdown``/``eta``, one after the other in
one run, on the same Celery worker: Celery's defaults (``-P prefork -c 2``) first, then
``-P threads -c 4``.

- burst: ``BURST`` jobs due at one instant (the batched hand-off on, as by default): drained
  jobs/s, from the due time to the last start (goal: the Django task's ≥ 0.8x delay_for's);
- steady: jobs coming due at 160, 320 and 480 a second for 2 s (due times evenly spaced,
  all scheduled before the first is due): lateness p50 / p99 from the due time to the
  task's start (goal at 480/s: the Django task's p99 within 1.5x delay_for's).

Each system runs ``ROUNDS`` times, interleaved; a figure is the median of its rounds, and
every round's value is in the figure's detail."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from bench.baselines import eta_at
from bench.env import BenchEnv, CeleryConfig
from bench.report import Figure
from bench.throughput import Sizes

SYSTEMS = ("delay_for", "Django task", "celery countdown")
RATES = (160, 320, 480)
STEADY_S = 2.0
BURST = 3_000
ROUNDS = 3
BURST_GOAL = 0.8  # the Django task's drain rate, at least this times delay_for's
P99_GOAL = 1.5  # at the highest rate, the Django task's p99 at most this times delay_for's


def _schedule(system: str) -> Callable[[list[int]], None]:
    """Writes jobs of ``system``, one call each (what a project does), due at the given
    epoch ms (whole ms: a Django task's run_after is never rounded)."""
    from bench.django_tasks import stamp_task
    from bench.tasks import stamp

    def delay_for(dues: list[int]) -> None:
        for due in dues:
            stamp.delay_until(due, eta=eta_at(due), on_commit=False)

    def django_task(dues: list[int]) -> None:
        using: dict[int, Any] = {}
        for due in dues:
            task = using.get(due)
            if task is None:
                run_after = datetime.fromtimestamp(due / 1000, tz=UTC)
                task = using[due] = stamp_task.using(run_after=run_after)
            task.enqueue(due)

    def countdown(dues: list[int]) -> None:
        for due in dues:
            stamp.apply_async(args=(due,), eta=eta_at(due))

    return {"delay_for": delay_for, "Django task": django_task, "celery countdown": countdown}[
        system
    ]


def _run(
    env: BenchEnv, system: str, make_dues: Callable[[str, float, float], list[int]]
) -> list[float]:
    """Schedule jobs of ``system`` due at ``make_dues(system, epoch ms now, lead factor)``
    and wait for every run: each job's lateness (ms, sorted). When the last job was
    written after the first was due (a machine busy with other work), the run is made
    again with twice the lead."""
    factor = _LEAD.get(system, 1.0)
    while True:
        late = _run_once(env, system, lambda now: make_dues(system, now, factor))  # noqa: B023
        if late is not None:
            _LEAD[system] = factor
            return late
        if factor >= 16:
            raise RuntimeError(f"benchmark: {system}'s jobs could not be written before due")
        factor *= 2


_LEAD: dict[str, float] = {}  # each system's lead factor, as the runs found it


def _run_once(
    env: BenchEnv, system: str, make_dues: Callable[[float], list[int]]
) -> list[float] | None:
    from bench.bursts import _stamps

    env.flush()
    env.start_celery()
    children = env.start_delay_workers(1, "bench") if system != "celery countdown" else []
    try:
        dues = make_dues(time.time() * 1000)
        _schedule(system)(dues)
        written_late = time.time() * 1000 > min(dues)
        timeout = max(dues) / 1000 - time.time() + 300
        rows = _stamps(env, len(dues), timeout)
    finally:
        env.stop(children)
    if written_late:
        return None
    return sorted(started - due for due, started in rows)


def _lead_ms(system: str, count: int, factor: float) -> float:
    """Time to write ``count`` jobs of ``system`` first (apply_async: ~1,500 messages/s
    on a quiet machine, delay_until and enqueue several times that)."""
    return 1_000 + factor * count * (1.0 if system == "celery countdown" else 0.3)


def _burst_dues(count: int) -> Callable[[str, float, float], list[int]]:
    return lambda system, now, factor: [int(now + _lead_ms(system, count, factor))] * count


def _steady_dues(rate: int, seconds: float) -> Callable[[str, float, float], list[int]]:
    count = int(rate * seconds)
    return lambda system, now, factor: [
        int(now + _lead_ms(system, count, factor) + i * 1000 / rate) for i in range(count)
    ]


def _drained(late: list[float]) -> float:
    """Jobs/s from the due instant to the last start."""
    return len(late) / max(0.001, late[-1] / 1000)


def _pct(values: list[float], p: float) -> float:
    from bench.timing import percentile

    return percentile(values, p)


def tasks_load(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    smoke = sizes.late_seconds < 5
    burst = 300 if smoke else BURST
    rounds = 1 if smoke else ROUNDS
    seconds = 0.5 if smoke else STEADY_S
    figures: list[Figure] = []
    first = env.celery_requested
    for config in (first, replace(first, pool="threads", concurrency=4)):
        env.use_celery(config)
        figures += _pool(env, config, burst, rounds, seconds)
    env.use_celery(first)
    return figures


def _pool(
    env: BenchEnv, config: CeleryConfig, burst: int, rounds: int, seconds: float
) -> list[Figure]:
    label = f"-P {config.pool} -c {config.concurrency}"
    drains: dict[str, list[float]] = {s: [] for s in SYSTEMS}
    late: dict[tuple[int, str], list[list[float]]] = {(r, s): [] for r in RATES for s in SYSTEMS}
    for _ in range(rounds):
        for system in SYSTEMS:
            drains[system].append(_drained(_run(env, system, _burst_dues(burst))))
        for rate in RATES:
            for system in SYSTEMS:
                late[rate, system].append(_run(env, system, _steady_dues(rate, seconds)))
    figures = []
    ours, theirs = drains["Django task"], drains["delay_for"]
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    detail = {"celery_worker": config.describe(), "jobs": burst, "rounds": drains,
              "ratios": ratios}  # fmt: skip
    figures += [
        Figure("tasks-load", f"Django task: {burst:,} due at once, drained ({label})",
               statistics.median(ours), "jobs/s", "delay_for, same run",
               statistics.median(theirs), f"≥ {BURST_GOAL}x",
               min(ratios) >= BURST_GOAL, detail),
        Figure("tasks-load", f"Django task: {burst:,} due at once, drained ({label})",
               statistics.median(ours), "jobs/s", "Celery countdown, same run",
               statistics.median(drains["celery countdown"])),
    ]  # fmt: skip
    for rate in RATES:
        count = int(rate * seconds)
        for name, p in (("p50", 50.0), ("p99", 99.0)):
            per = {s: [_pct(v, p) for v in late[rate, s]] for s in SYSTEMS}
            ours, theirs = per["Django task"], per["delay_for"]
            goal = name == "p99" and rate == max(RATES)
            met = all(a <= P99_GOAL * b for a, b in zip(ours, theirs, strict=True))
            detail = {"jobs": count, "rounds": per, "celery_worker": config.describe()}
            figures += [
                Figure("tasks-load", f"Django task: {rate}/s due for {seconds:g} s, lateness "
                       f"{name} ({label})", statistics.median(ours), "ms",
                       "delay_for, same run", statistics.median(theirs),
                       f"≤ {P99_GOAL}x" if goal else "", met if goal else None, detail),
                Figure("tasks-load", f"delay_for: {rate}/s due for {seconds:g} s, lateness "
                       f"{name} ({label})", statistics.median(theirs), "ms",
                       "Celery countdown, same run",
                       statistics.median(per["celery countdown"])),
            ]  # fmt: skip
    return figures
