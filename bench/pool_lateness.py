"""Lateness on each Celery pool (``--only pool-lateness``): ``JOBS`` jobs coming due at
``RATE`` a second (due times evenly spaced, all scheduled before the first is due), from the
due time to the task's start, as jobs of ``delay_until`` beside Celery's own ``countdown``/
``eta`` on the same Celery worker, in turns. Celery's defaults (``-P prefork -c 2``) first,
then the pool asked for (``--celery-pool threads --celery-concurrency 4``; the threads pool
with 4 threads when none is).

Each system runs ``ROUNDS`` times, interleaved; a figure is the median of its rounds, and
every round's value is in the figure's detail. The goal, on every pool: delay_for's p99 at
most ``P99_GOAL_MS`` in every round."""

from __future__ import annotations

import statistics
from dataclasses import replace

from bench.env import BenchEnv, CeleryConfig
from bench.report import Figure
from bench.tasks_load import _pct, _run, _steady_dues
from bench.throughput import Sizes

RATE = 250
JOBS = 1_000
ROUNDS = 3
P99_GOAL_MS = 10.0
SYSTEMS = ("delay_for", "celery countdown")


def configs(requested: CeleryConfig) -> list[CeleryConfig]:
    """Celery's defaults, then the pool asked for (the threads pool, 4 threads, when the
    defaults were)."""
    first = CeleryConfig(ack_emulation=requested.ack_emulation)
    if requested == first:
        return [first, replace(first, pool="threads", concurrency=4)]
    return [first, requested]


def rounds_of(env: BenchEnv, rate: int, jobs: int, rounds: int) -> dict[str, list[list[float]]]:
    """Each system's lateness (ms, sorted) in each round, on the Celery worker in use."""
    late: dict[str, list[list[float]]] = {system: [] for system in SYSTEMS}
    for _ in range(rounds):
        for system in SYSTEMS:
            late[system].append(_run(env, system, _steady_dues(rate, jobs / rate)))
    return late


def pool_lateness(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    smoke = sizes.late_seconds < 5
    jobs, rounds = (250, 1) if smoke else (JOBS, ROUNDS)
    figures: list[Figure] = []
    for config in configs(env.celery_requested):
        env.use_celery(config)
        late = rounds_of(env, RATE, jobs, rounds)
        label = f"-P {config.pool} -c {config.concurrency}"
        for name, p in (("p50", 50.0), ("p99", 99.0)):
            per = {s: [_pct(v, p) for v in late[s]] for s in SYSTEMS}
            ours = per["delay_for"]
            goal = name == "p99"
            detail = {"jobs": jobs, "rate": RATE, "rounds": per,
                      "celery_worker": config.describe()}  # fmt: skip
            figures.append(
                Figure("pool-lateness", f"delay_for: {jobs:,} due at {RATE}/s, lateness "
                       f"{name} ({label})", statistics.median(ours), "ms",
                       "Celery countdown, same run", statistics.median(per["celery countdown"]),
                       f"≤ {P99_GOAL_MS:g} ms" if goal else "",
                       max(ours) <= P99_GOAL_MS if goal else None, detail)
            )  # fmt: skip
    env.use_celery(env.celery_requested)
    return figures
