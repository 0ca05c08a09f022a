"""The peer run's medium- and light-load rows (part of ``--only peers``): ``jobs`` jobs due
evenly over ``seconds`` s, lateness p99 from the due time to the start, for delayqueue,
Celery's own ``countdown``/``eta`` and BullMQ, each alone on the same Redis and the same
Celery worker (Celery's defaults), alternating systems within each of ``ROUNDS`` rounds.

- delayqueue and BullMQ run as the peer run's overload does (bench/peers.py: ``delay_many``
  with each job's due instant, one ``run_delay_worker``; one BullMQ ``Worker`` on its
  defaults);
- Celery ``countdown`` as bench/tasks_load.py runs it: ``apply_async(eta=...)`` of each job,
  held in the Celery worker's memory until due.

Goal for both rows: delayqueue's p99 at most Celery's, in the median of the rounds (every
round's figures are in the detail)."""

from __future__ import annotations

import os
import statistics
from typing import Any

from bench.env import BenchEnv
from bench.report import Figure
from bench.tasks_load import _run, _steady_dues
from bench.timing import percentile

LOADS = (("medium", 1_200, 4.0), ("light", 500, 4.0))
SMOKE_LOADS = (("medium", 120, 0.5), ("light", 50, 0.5))
SYSTEMS = ("delayqueue", "Celery countdown", "BullMQ")
ROUNDS = 3


def _late(env: BenchEnv, system: str, jobs: int, seconds: float) -> list[float]:
    """Each job's lateness (ms, sorted) for ``system``, one run."""
    if system == "Celery countdown":
        return _run(env, "celery countdown", _steady_dues(int(jobs / seconds), seconds))
    from bench import peers

    return peers._late(env, system, jobs, seconds * 1000)


def load_rows(env: BenchEnv, smoke: bool) -> list[Figure]:
    """The medium- and light-load figures (the caller has put Celery's defaults in use)."""
    loads, rounds = (SMOKE_LOADS, 1) if smoke else (LOADS, ROUNDS)
    load_average = [os.getloadavg()]
    p99: dict[tuple[str, str], list[float]] = {}
    p50: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for name, jobs, seconds in loads:
            for system in SYSTEMS:
                late = _late(env, system, jobs, seconds)
                p99.setdefault((name, system), []).append(percentile(late, 99.0))
                p50.setdefault((name, system), []).append(percentile(late, 50.0))
    load_average.append(os.getloadavg())
    figures = []
    for name, jobs, seconds in loads:
        ours = p99[name, "delayqueue"]
        celery = p99[name, "Celery countdown"]
        detail: dict[str, Any] = {
            "jobs": jobs,
            "seconds": seconds,
            "p99_ms": {s: p99[name, s] for s in SYSTEMS},
            "p50_ms": {s: p50[name, s] for s in SYSTEMS},
            "ratios_to_celery": [a / b for a, b in zip(ours, celery, strict=True)],
            "load_average_start_end": load_average,
        }
        value, baseline = statistics.median(ours), statistics.median(celery)
        label = f"{name} load: {jobs:,} due over {seconds:g} s, lateness p99"
        figures.append(
            Figure(
                "peers",
                label,
                value,
                "ms",
                "Celery countdown, same worker",
                baseline,
                "≤ Celery's",
                value <= baseline,
                detail,
            )  # fmt: skip
        )
        bullmq = statistics.median(p99[name, "BullMQ"])
        figures.append(
            Figure(
                "peers", label, value, "ms", "BullMQ Worker (its defaults)", bullmq, detail=detail
            )  # fmt: skip
        )
    return figures
