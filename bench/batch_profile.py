"""What one job of a batch costs the Celery side, in process:
``python -m bench.batch_profile [--jobs 4000] [--batch 128] [--rounds 3] [--top 30]``.

``--jobs`` ``bench.tasks.stamp`` jobs due now are claimed (the delay worker's claim) and
run as ``--batch`` jobs to a ``delayqueue.run_batch`` message by Celery's own tracer (what
a pool process runs for a message: ``celery.app.trace.build_tracer``, not eager), in this
process. Printed per job, each round: the Python function calls (cProfile), this process's
CPU µs (``time.process_time``, without the profiler) and the Redis server's µs by command
(INFO commandstats), then the profile's functions by their own time. ``--empty`` leaves
the task's body out (its RPUSH): what remains is delayqueue's and Celery's."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.env import BenchEnv


def _claimed(env: BenchEnv, count: int) -> list[list[Any]]:
    """``count`` stamp jobs due now, claimed: their batch entries."""
    from bench.tasks import stamp
    from delayqueue.engine.execution import run
    from delayqueue.engine.keys import queue_keys
    from delayqueue.observability import reported
    from delayqueue.wire import BatchEntry, decode_args
    from delayqueue.worker.claimed import decode_claimed

    env.flush()
    now_ms = int(time.time() * 1000)
    for start in range(0, count, 1_000):
        stamp.delay_many([(now_ms,)] * min(1_000, count - start), seconds=0, on_commit=False)
    keys = queue_keys("bench")
    entries: list[list[Any]] = []
    while len(entries) < count:
        claim = run(reported.claim(keys, limit=1_000, visibility_ms=300_000))
        for raw in claim.jobs:
            job = decode_claimed("bench", raw, claim.now_ms)
            assert job is not None
            args, kwargs = decode_args(job.args_json, job.kwargs_json)
            entries.append(BatchEntry(job.id, job.token, args, kwargs, job.due_ms).entry())
    return entries


def _tracer() -> Callable[[list[list[Any]]], None]:
    """Run one batch message's entries as a pool process runs a message."""
    from celery.app.trace import build_tracer

    from delayqueue.celery_app import get_celery_app
    from delayqueue.wire import RUN_BATCH

    app = get_celery_app()
    task = app.tasks[RUN_BATCH]
    trace = build_tracer(RUN_BATCH, task, app=app, eager=False)

    def run(entries: list[list[Any]]) -> None:
        task_id = uuid.uuid4().hex
        request = {
            "id": task_id,
            "task": RUN_BATCH,
            "delivery_info": {"routing_key": "celery"},
            "hostname": "bench@profile",
            "headers": {"dq_batch": str(len(entries))},
        }
        trace(task_id, ["bench", "bench.tasks.stamp", entries], {}, request)

    return run


def _commandstats(env: BenchEnv) -> dict[str, tuple[int, int]]:
    stats = env.client().info("commandstats")
    return {name: (int(row["calls"]), int(row["usec"])) for name, row in stats.items()}


def _round(
    env: BenchEnv, jobs: int, batch: int, profile: bool, empty: bool = False
) -> tuple[float, float, dict[str, float], pstats.Stats | None]:
    from bench.tasks import LATENESS, stamp

    entries = _claimed(env, jobs)
    if empty:  # the task's body left out: what remains is delayqueue's and Celery's
        ran: list[int] = []
        stamp.run = ran.append  # type: ignore[method-assign]
    run = _tracer()
    before = _commandstats(env)
    profiler = cProfile.Profile() if profile else None
    cpu, wall = time.process_time(), time.perf_counter()
    if profiler is not None:
        profiler.enable()
    for start in range(0, jobs, batch):
        run(entries[start : start + batch])
    if profiler is not None:
        profiler.disable()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    after = _commandstats(env)
    redis = {
        name: (usec - before.get(name, (0, 0))[1]) / jobs
        for name, (_calls, usec) in after.items()
        if usec - before.get(name, (0, 0))[1] > 0
    }
    if empty:
        del stamp.run
    done = len(ran) if empty else int(env.client().llen(LATENESS))
    if done != jobs:
        raise RuntimeError(f"benchmark: {done} of {jobs} jobs ran")
    return cpu / jobs * 1e6, wall / jobs * 1e6, redis, pstats.Stats(profiler) if profiler else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.batch_profile", description=__doc__)
    parser.add_argument("--jobs", type=int, default=4_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--empty", action="store_true", help="the task's body left out")
    options = parser.parse_args(argv)
    env, empty = BenchEnv(), options.empty
    try:
        _round(env, min(options.jobs, 512), options.batch, False)  # warm up
        for _ in range(options.rounds):
            cpu_us, wall_us, redis, _ = _round(env, options.jobs, options.batch, False, empty)
            rows = ", ".join(f"{k} {v:.1f}" for k, v in sorted(redis.items(), key=lambda r: -r[1]))
            total = sum(redis.values())
            print(f"CPU {cpu_us:.1f} µs/job (wall {wall_us:.1f}); Redis µs/job {total:.1f}: {rows}")
        _, _, _, stats = _round(env, options.jobs, options.batch, True, empty)
    finally:
        env.close()
    assert stats is not None
    calls = sum(row[1] for row in stats.stats.values())  # type: ignore[attr-defined]
    print(f"Python calls per job (cProfile): {calls / options.jobs:.1f}")
    stats.sort_stats("tottime").print_stats(options.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
