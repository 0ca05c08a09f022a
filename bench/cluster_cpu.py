"""The client's CPU per ``delay_for`` call, in this process: one redis-server against a Redis
Cluster of three masters (a replica each, as bench/cluster.py starts them), alternated,
three rounds by default.

    python -m bench.cluster_cpu [--calls 20000] [--rounds 3]

``time.process_time`` over N calls, not the wall clock: the scenario ``cluster`` of
``python -m bench`` is client-CPU bound on two cores, so the rate it finds follows the
client's CPU per call, and that CPU is the same whatever else runs on the machine (the wall
clock is not). Each measurement's calls go to the 12 queues in turn (4 on each master of
the cluster, all 12 on the single server), after a warm-up on each queue (connections
made, scripts loaded, queues registered), and the topology is flushed afterwards. The
rounds alternate which topology goes first. The last column, single / cluster, is the
cluster's rate relative to the single server's when the client's CPU is what limits both.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.cluster import _cluster, _single, balanced_queues
from bench.cluster_crew import Topology
from bench.env import BenchEnv

WARM_UP = 50  # calls per queue before each measurement


def measure(topology: Topology, queues: list[str], calls: int) -> tuple[float, float, float]:
    """(CPU µs, of which in the kernel, wall µs) per ``delay_for`` call on ``topology``."""
    from django.test.utils import override_settings

    from bench.throughput import _noop
    from delayqueue.producer import api

    noop, enqueue = _noop(), api.enqueue
    config = {"REDIS_URL": topology.url, "REDIS_CLUSTER": topology.cluster, "SAFETY_POLL": 5.0}
    with override_settings(DELAYQUEUE=config):
        for i in range(WARM_UP * len(queues)):
            enqueue(noop, (i,), delay=3_600, queue=queues[i % len(queues)], on_commit=False)
        cpu, system, wall = time.process_time(), os.times().system, time.perf_counter()
        for i in range(calls):
            enqueue(noop, (i,), delay=3_600 + i % 3_600, queue=queues[i % len(queues)],
                    on_commit=False)  # fmt: skip
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        system = os.times().system - system
    topology.flush()
    return cpu / calls * 1e6, system / calls * 1e6, wall / calls * 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    env = BenchEnv()
    single, cluster_set = _single(), None
    try:
        clustered, cluster_set = _cluster()
        queues = balanced_queues(cluster_set)
        rows: list[dict[str, Any]] = []
        for number in range(options.rounds):
            pair = (single, clustered) if number % 2 == 0 else (clustered, single)
            found = {t.name: measure(t, queues, options.calls) for t in pair}
            rows.append({"round": number + 1, "first": pair[0].name, **found})
        print_table(rows, single.name, clustered.name, options.calls)
    finally:
        single.masters[0].cleanup()
        if cluster_set is not None:
            cluster_set.cleanup()
        env.close()


def print_table(rows: list[dict[str, Any]], single: str, clustered: str, calls: int) -> None:
    import delayqueue

    table = Table(
        title=f"delay_for: the client's CPU per call, {calls:,} calls per measurement",
        caption=f"delayqueue from {delayqueue.__file__}",
    )
    columns = ("round", "first", f"{single} CPU µs (kernel)", f"{clustered} CPU µs (kernel)",
               "single / cluster (CPU)", f"{single} wall µs", f"{clustered} wall µs")  # fmt: skip
    for name in columns:
        table.add_column(name, justify="right")
    for row in rows:
        (one_cpu, one_sys, one_wall), (many_cpu, many_sys, many_wall) = row[single], row[clustered]
        table.add_row(
            str(row["round"]), row["first"], f"{one_cpu:.1f} ({one_sys:.1f})",
            f"{many_cpu:.1f} ({many_sys:.1f})",
            f"{one_cpu / many_cpu:.2f}×", f"{one_wall:.1f}", f"{many_wall:.1f}",
        )  # fmt: skip
    Console(width=150).print(table)


if __name__ == "__main__":
    main()
