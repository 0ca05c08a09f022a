"""Where a Django task's job spends the Celery side's time, against a ``delay_for`` job's:
``python -m bench.tasks_profile [--jobs 3000] [--steady 320] [--top 40]``.

The Celery worker runs under cProfile on the solo pool (every task in its main process, so
the profile sees the whole of each job's run: the begin, the task, the settling), and
drains ``--jobs`` jobs of the same body (``bench.tasks.stamp``, ``bench.django_tasks.
stamp_task``) due at one instant (the batched hand-off on), or with ``--steady RATE``
coming due at RATE a second (one job to a message), one system per worker. Printed: each
system's worker µs per job under delayqueue's entry points, then the Django task's
functions by their own time and by their cumulative time."""

from __future__ import annotations

import argparse
import pstats
import sys
import time

from bench.env import BenchEnv

ENTRY_POINTS = ("run_batch", "run_job", "run_attempt", "run_django_task", "stamp", "stamp_task")


def profile(env: BenchEnv, system: str, jobs: int, steady: int) -> pstats.Stats:
    from bench.tasks_load import _burst_dues, _run, _steady_dues

    out = env.dir / f"profile-{system.replace(' ', '-')}.out"
    worker = env._start(
        f"celery-profiled-{system}",
        [sys.executable, "-m", "cProfile", "-o", str(out), "-m", "celery", "-A", "orders_demo",
         "worker", "-l", "warning", "-P", "solo", "-Q", "celery",
         "--without-gossip", "--without-mingle", "--without-heartbeat"],
    )  # fmt: skip
    env.celery = worker
    try:
        dues = _steady_dues(steady, jobs / steady) if steady else _burst_dues(jobs)
        _run(env, system, dues)
    finally:
        worker.stop()
        env.celery = None
    return pstats.Stats(str(out))


def per_job(stats: pstats.Stats, jobs: int) -> dict[str, float]:
    """Cumulative µs per job of each entry point found (the largest entry of each name)."""
    found: dict[str, float] = {}
    for (_file, _line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        if name in ENTRY_POINTS:
            found[name] = max(found.get(name, 0.0), row[3] / jobs * 1e6)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tasks_profile", description=__doc__)
    parser.add_argument("--jobs", type=int, default=3_000)
    parser.add_argument("--steady", type=int, default=0, help="jobs/s coming due (0: a burst)")
    parser.add_argument("--top", type=int, default=40)
    options = parser.parse_args(argv)
    env = BenchEnv()
    try:
        results = {}
        for system in ("delay_for", "Django task"):
            started = time.perf_counter()
            results[system] = profile(env, system, options.jobs, options.steady)
            print(f"{system}: {time.perf_counter() - started:.1f} s", file=sys.stderr)
    finally:
        env.close()
    for system, stats in results.items():
        rows = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(per_job(stats, options.jobs).items()))
        print(f"{system}: µs per job, cumulative: {rows}")
    stats = results["Django task"]
    stats.sort_stats("tottime").print_stats(options.top)
    stats.sort_stats("cumulative").print_stats(options.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
