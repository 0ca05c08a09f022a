"""CPU a job costs the Celery side, a Django task's against ``delay_for``'s, in this process:
``python -m bench.tasks_cpu [--jobs 2000] [--rounds 2] [--profile TOP]``.

Each round dispatches ``--jobs`` jobs of each kind (the same body: ``bench.tasks.stamp``,
``bench.django_tasks.stamp_task``), all due now, with an in-process delay worker onto a
broker list no Celery worker reads (the batched hand-off on, as in a burst), then runs the
messages here as the Celery worker runs them (``Task.apply`` with their headers), in a
process whose start is frozen as a Celery process's is (``FREEZE_PROCESS_START``), with a
full collection before each measured stretch (the dispatch's garbage is neither kind's). Measured:
this process's CPU time per job and the Redis server's (``INFO cpu``) over the runs, and
the µs Redis spent in scripts per job (``INFO commandstats``: EVALSHA's, its commands
included). CPU time, unlike the wall clock, does not count the time a process waits for
the cores that other work holds, so it compares the two kinds on a busy machine (the
wall-clock drain is ``--only tasks-load``'s). ``--profile TOP`` runs each kind once more
under cProfile: Python calls per job (a count, whatever the machine's load), and the
Django task's TOP functions by their own time. ``--interleaved`` dispatches both kinds at
once each round and runs their messages alternately, one message (a batch) of each in turn,
so a load that changes during a round weighs on both kinds alike; the ratio is then given
per round too."""

from __future__ import annotations

import argparse
import base64
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
from datetime import UTC, datetime
from typing import Any

from bench.env import BenchEnv

KINDS = ("delay_for", "Django task")


def _decode(payload: Any) -> tuple[str, list[Any], dict[str, Any], dict[str, Any]]:
    from kombu.utils.json import loads

    envelope = loads(payload)
    body = envelope["body"]
    if envelope.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, kwargs, _ = loads(body)
    return envelope["headers"]["task"], list(args), dict(kwargs), envelope["headers"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tasks_cpu", description=__doc__)
    parser.add_argument("--jobs", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--profile", type=int, default=0, metavar="TOP",
        help="also run each kind's jobs once more under cProfile: calls per job, and the "
        "Django task's TOP functions by their own time",
    )  # fmt: skip
    parser.add_argument(
        "--interleaved", action="store_true",
        help="dispatch both kinds together and run their messages alternately",
    )  # fmt: skip
    options = parser.parse_args(argv)
    env = BenchEnv()
    try:
        results = _measure(
            env, options.jobs, options.rounds, options.profile, interleaved=options.interleaved
        )
    finally:
        env.close()
    if options.interleaved:
        ratios = [
            (c + r) / (dc + dr)
            for (dc, dr), (c, r) in zip(results["delay_for"], results["Django task"], strict=True)
        ]
        print("per round, a Django task's job against a delay_for job's: "
              + ", ".join(f"{x:.2f}x" for x in ratios))  # fmt: skip
    totals = {kind: statistics.median(c + r for c, r in rows) for kind, rows in results.items()}
    for kind, rows in results.items():
        shown = ", ".join(f"{c:.0f} + {r:.0f}" for c, r in rows)
        print(f"{kind}: µs of CPU per job, Celery side + Redis: {shown}")
    ratio = totals["delay_for"] / totals["Django task"]
    print(f"a Django task's job costs {1 / ratio:.2f}x a delay_for job's (ratio {ratio:.2f})")
    return 0


def _measure(
    env: BenchEnv, jobs: int, rounds: int, top: int = 0, *, interleaved: bool = False
) -> dict[str, list[tuple[float, float]]]:
    import redis
    from celery import Celery

    from bench.django_tasks import stamp_task
    from bench.tasks import stamp
    from delayqueue import tasks as celery_side
    from delayqueue.producer import api as client
    from delayqueue.worker.loop import DelayWorker

    url = f"redis://127.0.0.1:{env.server.port}/2"  # no Celery worker reads it
    os.environ.pop("CELERY_BROKER_URL", None)
    app = Celery(broker=url)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.update(broker_url=url)
    broker = redis.Redis.from_url(url)

    def dispatched(*kinds: str) -> list[tuple[str, list[Any], dict[str, Any], dict[str, Any]]]:
        env.flush(0, 2)
        now = int(time.time() * 1000)
        if "delay_for" in kinds:
            specs = [client.spec(stamp, (now,), delay=0) for _ in range(jobs)]
            for start in range(0, jobs, 1_000):
                client.delay_many(specs[start : start + 1_000], on_commit=False)
        if "Django task" in kinds:
            task = stamp_task.using(run_after=datetime.fromtimestamp(now / 1000, tz=UTC))
            for _ in range(jobs):
                task.enqueue(now)
        worker = DelayWorker(["bench"], celery_app=app)
        try:
            while worker.run_pass().claimed:
                pass
        finally:
            worker.close()
        return [_decode(m) for m in reversed(broker.lrange("celery", 0, -1))]

    def redis_cpu() -> float:
        info = env.client().info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    def scripts_us() -> float:
        """µs Redis has spent running scripts (their commands' included)."""
        info = env.client().info("commandstats")
        return sum(float(info.get(f"cmdstat_{c}", {}).get("usec", 0)) for c in ("evalsha", "eval"))

    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in KINDS}
    in_scripts: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for kind in KINDS:  # a first round each, not counted: imports, connections, scripts
        for name, args, kwargs, headers in dispatched(kind)[:2]:
            app.tasks[name].apply(args=tuple(args), kwargs=kwargs, headers=headers)
    celery_side._freeze_start()  # as a Celery process does once ready (FREEZE_PROCESS_START)
    for _ in range(rounds if interleaved else 0):
        both = dispatched(*KINDS)
        gc.collect()  # (the dispatch's garbage: not either kind's to collect)
        by_kind = {kind: [m for m in both if _kind(m) == kind] for kind in KINDS}
        spent = {kind: [0.0, 0.0, 0.0] for kind in KINDS}  # own, Redis, in scripts
        for pair in zip(*(by_kind[kind] for kind in KINDS), strict=False):
            for kind, (name, args, kwargs, headers) in zip(KINDS, pair, strict=True):
                own, server, scripts = time.process_time(), redis_cpu(), scripts_us()
                app.tasks[name].apply(args=tuple(args), kwargs=kwargs, headers=headers)
                own, server = time.process_time() - own, redis_cpu() - server
                spent[kind][0] += own
                spent[kind][1] += server
                spent[kind][2] += scripts_us() - scripts
        for kind in KINDS:
            count = sum(_jobs_in(m) for m in by_kind[kind][: min(map(len, by_kind.values()))])
            own, server, scripts = spent[kind]
            results[kind].append((own / count * 1e6, server / count * 1e6))
            in_scripts[kind].append(scripts / count)
    for _ in range(0 if interleaved else rounds):
        for kind in KINDS:
            messages = dispatched(kind)
            gc.collect()
            own, server, scripts = time.process_time(), redis_cpu(), scripts_us()
            for name, args, kwargs, headers in messages:
                app.tasks[name].apply(args=tuple(args), kwargs=kwargs, headers=headers)
            own, server = time.process_time() - own, redis_cpu() - server
            results[kind].append((own / jobs * 1e6, server / jobs * 1e6))
            in_scripts[kind].append((scripts_us() - scripts) / jobs)
    for kind in KINDS if top else ():
        messages = dispatched(kind)
        profiler = cProfile.Profile()
        profiler.enable()
        for name, args, kwargs, headers in messages:
            app.tasks[name].apply(args=tuple(args), kwargs=kwargs, headers=headers)
        profiler.disable()
        stats = pstats.Stats(profiler)
        calls = sum(row[1] for row in stats.stats.values())  # type: ignore[attr-defined]
        print(f"{kind}: {calls / jobs:.1f} Python calls per job (cProfile)")
        if kind == "Django task":
            stats.sort_stats("tottime").print_stats(top)
    broker.close()
    for kind, rows in in_scripts.items():
        shown = ", ".join(f"{us:.1f}" for us in rows)
        print(f"{kind}: Redis µs per job in scripts (INFO commandstats): {shown}")
    return results


def _kind(message: tuple[str, list[Any], dict[str, Any], dict[str, Any]]) -> str:
    """The kind of job a message runs (a batch's: its task's)."""
    from delayqueue.django_tasks.job_args import RUN_DJANGO_TASK
    from delayqueue.wire import RUN_BATCH

    name, args = message[0], message[1]
    task = args[1] if name == RUN_BATCH else name
    return "Django task" if task == RUN_DJANGO_TASK else "delay_for"


def _jobs_in(message: tuple[str, list[Any], dict[str, Any], dict[str, Any]]) -> int:
    from delayqueue.wire import RUN_BATCH

    return len(message[1][2]) if message[0] == RUN_BATCH else 1


if __name__ == "__main__":
    sys.exit(main())
