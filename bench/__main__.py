"""``python -m bench [--smoke] [--json PATH] [--only enqueue,claim,...|cluster|async] [--aof]
[--celery-pool prefork --celery-concurrency 2 --celery-prefetch 4
--celery-ack-emulation on]`` (Celery's defaults)"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from bench.env import BenchEnv
    from bench.report import Figure
    from bench.throughput import Sizes

SCENARIOS = ("enqueue", "claim", "dispatch", "lateness", "burst", "spread", "memory", "scale")
# Run only when named in --only: ``cluster`` starts a Redis Cluster and 8 processes of its own;
# ``async`` is the async API's (bench/async_enqueue.py); ``periodic`` periodic jobs' against
# Celery beat (bench/periodic.py); ``tasks`` Django's Tasks API on delayqueue
# (bench/tasks_backend.py); ``tracing`` what a trace across the delay costs (bench/tracing.py);
# ``limits`` what limits cost and how closely a rate holds (bench/limits.py); ``tasks-load``
# what a Django task's job costs the Celery side against delay_for's (bench/tasks_load.py);
# ``peers`` delayqueue beside BullMQ (node, installed on first use) and huey (bench/peers.py);
# ``pool-lateness`` lateness at 250/s on prefork and on the threads pool (bench/pool_lateness.py).
OPT_IN = (
    "cluster", "async", "periodic", "tasks", "tracing", "limits", "tasks-load", "peers",
    "pool-lateness",
)  # fmt: skip
RESULTS = Path(__file__).resolve().parent / "results"


def scenario_functions() -> dict[str, Callable[[BenchEnv, Sizes], list[Figure]]]:
    from bench import (
        async_enqueue,
        bursts,
        cluster,
        limits,
        peers,
        periodic,
        pool_lateness,
        tasks_backend,
        tasks_load,
        throughput,
        timing,
        tracing,
    )

    return {
        "enqueue": throughput.enqueue,
        "claim": throughput.claim,
        "dispatch": timing.dispatch,
        "lateness": timing.lateness,
        "burst": bursts.burst,
        "spread": bursts.spread,
        "memory": throughput.memory,
        "scale": throughput.scale,
        "cluster": cluster.cluster,
        "async": async_enqueue.async_enqueue,
        "periodic": periodic.periodic,
        "tasks": tasks_backend.tasks,
        "tasks-load": tasks_load.tasks_load,
        "tracing": tracing.tracing,
        "limits": limits.limits,
        "peers": peers.peers,
        "pool-lateness": pool_lateness.pool_lateness,
    }


def main(argv: list[str] | None = None) -> int:
    from bench.env import BenchEnv, CeleryConfig

    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: every scenario in <60 s")
    parser.add_argument("--json", type=Path, help="where to write the figures")
    parser.add_argument(
        "--only",
        help=f"comma-separated scenarios of {','.join(SCENARIOS)} (the default run), or of "
        f"{','.join(OPT_IN)} (only when named)",
    )
    parser.add_argument("--aof", action="store_true", help="Redis with appendfsync everysec")
    default = CeleryConfig()
    parser.add_argument("--celery-pool", default=default.pool, help="the Celery worker's -P")
    parser.add_argument("--celery-concurrency", type=int, default=default.concurrency,
                        help="its -c")  # fmt: skip
    parser.add_argument("--celery-prefetch", type=int, default=default.prefetch_multiplier,
                        help="its --prefetch-multiplier")  # fmt: skip
    parser.add_argument(
        "--celery-ack-emulation",
        choices=("on", "off"),
        default="on" if default.ack_emulation else "off",
        help="kombu's Redis ack emulation (broker_transport_options); off is docs/worker.md's "
        "recommendation for delayqueue's tasks, on is Celery's default",
    )
    options = parser.parse_args(argv)
    only = [s.strip() for s in options.only.split(",")] if options.only else list(SCENARIOS)
    unknown = set(only) - set(SCENARIOS) - set(OPT_IN)
    if unknown:
        parser.error(f"unknown scenarios: {', '.join(sorted(unknown))}")

    console = Console(width=max(Console().width, 150))  # the table is wide: don't fold it
    celery = CeleryConfig(
        pool=options.celery_pool,
        concurrency=options.celery_concurrency,
        prefetch_multiplier=options.celery_prefetch,
        ack_emulation=options.celery_ack_emulation == "on",
    )
    env = BenchEnv(aof=options.aof, celery=celery)
    from bench.report import print_table, write_json
    from bench.throughput import SMOKE, Sizes

    sizes = SMOKE if options.smoke else Sizes()
    functions = scenario_functions()
    figures: list[Figure] = []
    timings: dict[str, float] = {}
    try:
        for name in only:
            console.log(f"scenario {name} ...")
            started = time.perf_counter()
            figures += functions[name](env, sizes)
            timings[name] = round(time.perf_counter() - started, 2)
    finally:
        env.close()
    print_table(figures, console, caption=celery.describe())
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = options.json or RESULTS / f"{stamp}.json"
    params = {
        "smoke": options.smoke,
        "aof": options.aof,
        "celery_worker": asdict(celery),
        "scenarios": only,
        "sizes": asdict(sizes),
        "seconds": timings,
    }
    console.print(f"figures written to {write_json(figures, path, params)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
