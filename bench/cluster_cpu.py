"""The CPU per ``delay_for`` call, the client's (in this process) and the redis-servers':
one redis-server alone, the same with a replica, a Redis Cluster of three masters without
replicas and one with a replica each (as bench/cluster.py starts it), alternated, three
rounds by default: what replication costs and what sharding costs, each without the other.

    python -m bench.cluster_cpu [--calls 20000] [--rounds 3]

CPU time, not the wall clock, which another program on the machine stretches: the client's
from ``time.process_time`` over N calls, each redis-server's from ``/proc/<pid>/stat``, and
the masters' time inside EVALSHA (``INFO commandstats``: the script's run; the rest of a
master's CPU is reading, replying, replicating and its event loop). The
scenario ``cluster`` of ``python -m bench`` keeps both cores busy from two producers on, so
its rate follows the CPU of a job on the whole machine, the servers' included: the last
column, 1 master / it (all CPU), is a topology's rate relative to the single server's when
the cores are what limits both; 1 master / it (client CPU) is that ratio if the client's
CPU were all there was. Each measurement's calls go to the 12 queues in turn (4 on
each master of the cluster, all 12 on the single server), after a warm-up on each queue
(connections made, scripts loaded, queues registered), and the topology is flushed
afterwards. The rounds turn which topology goes first.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import NamedTuple

from rich.console import Console
from rich.table import Table

from bench.cluster import _cluster, _single, balanced_queues, cleanup
from bench.cluster_crew import Topology
from bench.env import BenchEnv
from tests.support.redis_server import RedisServer
from tests.support.topologies import ClusterSet

WARM_UP = 50  # calls per queue before each measurement


class PerCall(NamedTuple):
    """µs per ``delay_for`` call."""

    client: float  # CPU of this process
    kernel: float  # of which in the kernel
    masters: float  # CPU of the masters
    scripts: float  # of which inside EVALSHA
    replicas: float  # and of their replicas
    wall: float

    @property
    def all(self) -> float:
        return self.client + self.masters + self.replicas


def measure(topology: Topology, queues: list[str], calls: int) -> PerCall:
    """The CPU (and wall) µs per ``delay_for`` call on ``topology``."""
    from django.test.utils import override_settings

    from bench.throughput import _noop
    from delayqueue.producer import api

    noop, enqueue = _noop(), api.enqueue
    config = {"REDIS_URL": topology.url, "REDIS_CLUSTER": topology.cluster, "SAFETY_POLL": 5.0}
    with override_settings(DELAYQUEUE=config):
        for i in range(WARM_UP * len(queues)):
            enqueue(noop, (i,), delay=3_600, queue=queues[i % len(queues)], on_commit=False)
        for master in topology.masters:
            master.client().config_resetstat()
        servers = topology.cpu_seconds()
        cpu, system, wall = time.process_time(), os.times().system, time.perf_counter()
        for i in range(calls):
            enqueue(noop, (i,), delay=3_600 + i % 3_600, queue=queues[i % len(queues)],
                    on_commit=False)  # fmt: skip
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        system = os.times().system - system
        servers = {k: v - servers[k] for k, v in topology.cpu_seconds().items()}
        scripts = sum(_evalsha_seconds(master) for master in topology.masters)
    topology.flush()
    return PerCall(*(s / calls * 1e6 for s in (cpu, system, servers["masters"], scripts,
                                               servers["replicas"], wall)))  # fmt: skip


def _evalsha_seconds(server: RedisServer) -> float:
    """The seconds ``server`` spent running EVALSHA since its stats were reset."""
    stats = server.client().info("commandstats").get("cmdstat_evalsha", {})
    return float(stats.get("usec", 0)) / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args(argv)
    env = BenchEnv()
    singles: list[Topology] = []
    clusters: list[ClusterSet] = []
    try:
        singles = [_single()]
        singles.append(_single(replica=True))
        bare, made = _cluster(replicas=False)
        clusters.append(made)
        clustered, made = _cluster()
        clusters.append(made)
        queues = balanced_queues(made)
        if balanced_queues(clusters[0]) != queues:  # (both split the slots alike)
            raise RuntimeError("the two clusters spread the queues differently")
        order = [*singles, bare, clustered]
        rows: list[dict[str, PerCall]] = []
        for number in range(options.rounds):
            turned = order[number % len(order) :] + order[: number % len(order)]
            rows.append({t.name: measure(t, queues, options.calls) for t in turned})
        print_table(rows, [t.name for t in order], options.calls)
    finally:
        for single in singles:
            cleanup(single)
        for cluster_set in clusters:
            cluster_set.cleanup()
        env.close()


def print_table(rows: list[dict[str, PerCall]], names: list[str], calls: int) -> None:
    import delayqueue

    table = Table(
        title=f"delay_for: CPU µs per call, {calls:,} calls per measurement",
        caption=f"delayqueue from {delayqueue.__file__}",
    )
    columns = ("round", "topology", "client CPU (kernel)", "masters (in EVALSHA)", "replicas",
               "all CPU", "wall", "1 master / it (client CPU)",
               "1 master / it (all CPU)")  # fmt: skip
    for name in columns:
        table.add_column(name, justify="left" if name == "topology" else "right")
    single = names[0]
    for number, row in enumerate(rows, 1):
        for name in names:
            c = row[name]
            ratios = ("", "")
            if name != single:
                one = row[single]
                ratios = (f"{one.client / c.client:.2f}×", f"{one.all / c.all:.2f}×")
            table.add_row(
                str(number), name, f"{c.client:.1f} ({c.kernel:.1f})",
                f"{c.masters:.1f} ({c.scripts:.1f})",
                f"{c.replicas:.1f}", f"{c.all:.1f}", f"{c.wall:.1f}", *ratios,
                end_section=name == names[-1],
            )  # fmt: skip
    Console(width=170).print(table)


if __name__ == "__main__":
    main()
