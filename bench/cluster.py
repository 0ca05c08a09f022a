"""Scenario ``cluster``: enqueue and claim throughput on one redis-server against a Redis
Cluster of three masters (each with a replica, as production runs it), with 1, 2 and 4
producer (or claimer) processes, and where the CPU went meanwhile.

    python -m bench --only cluster [--smoke]

Both topologies are started here, on free ports, and serve the same 12 queues: 4 on each
master of the cluster (names picked by their slot), all 12 on the single server. Each
process is a fresh interpreter (multiprocessing's spawn) with Django set up on one topology;
it waits, connected and warmed up, until every process of the measurement is ready.

- ``delay_for``: ``delayqueue.enqueue(task, (i,), delay=..., queue=q)`` per job, the queues
  in turn (the latency path: one round trip per job).
- ``delay_many``: ``delay_many`` of ``spec()``\\ s in batches of 1,200 jobs, 100 per queue
  (one pipeline per batch; on the cluster one per master).
- ``claim``: the delay worker's pass (reap + claim on every queue in one round trip, the rows
  decoded: ``bench.throughput.ClaimOnly``) over jobs all due, dispatch to Celery left out.

CPU: each process measures its own (``time.process_time``), each redis-server's is read from
``/proc/<pid>/stat`` and the machine's from ``/proc/stat`` before and after. Not in the
default run (``python -m bench`` runs the scenarios of ``SCENARIOS``): it starts seven more
redis-servers and eight processes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from rich.console import Console
from rich.table import Table

from bench.cluster_crew import Crew, Measurement, Topology
from bench.env import BenchEnv
from bench.report import Figure
from bench.throughput import SMOKE, Sizes
from tests.support.redis_server import RedisServer
from tests.support.topologies import ClusterSet

QUEUES_PER_MASTER = 4
MASTERS = 3
NOISY = 0.10  # 'other' CPU above this share of the cores: the figures are not this code's


@dataclass(frozen=True)
class ClusterSizes:
    processes: tuple[int, ...] = (1, 2, 4)  # producers (and claimers) per measurement
    delay_for: int = 20_000  # jobs per measurement, shared by its processes
    delay_many: int = 120_000
    many_batch: int = 1_200  # 100 per queue
    claim: int = 120_000


SMOKE_SIZES = ClusterSizes(processes=(2,), delay_for=600, delay_many=12_000, claim=12_000)


# ---- the two topologies ----------------------------------------------------------------------


def _single() -> Topology:
    server = RedisServer(extra=["--maxmemory-policy", "noeviction"]).start()
    return Topology("1 master", server.url, False, [server], [], lambda: server.flush(0))


def _cluster() -> tuple[Topology, ClusterSet]:
    # Redis's default node timeout (the tests' 1 s fails a master over while two cores are
    # saturated: the cluster goes down mid-measurement).
    cluster = ClusterSet(masters=MASTERS, replicas_per_master=1, node_timeout_ms=15_000).start()
    masters = [cluster.server_on(port) for port, _id in cluster.masters()]
    replicas = [s for s in cluster.servers if s not in masters]
    topology = Topology(f"{MASTERS} masters", cluster.url, True, masters, replicas, cluster.flush)
    return topology, cluster


def balanced_queues(cluster: ClusterSet) -> list[str]:
    """Queue names, QUEUES_PER_MASTER on each master (each queue's keys hash by ``{name}``)."""
    by_master: dict[int, list[str]] = {}
    index = 0
    while sum(len(v) for v in by_master.values()) < QUEUES_PER_MASTER * MASTERS:
        name = f"bench-{index}"
        names = by_master.setdefault(cluster.master_of(f"{{{name}}}").port, [])
        if len(names) < QUEUES_PER_MASTER:
            names.append(name)
        index += 1
    return sorted((n for names in by_master.values() for n in names), key=lambda n: int(n[6:]))


# ---- the processes ----------------------------------------------------------------------------


@contextmanager
def topologies(sizes: ClusterSizes) -> Iterator[tuple[list[str], list[Crew], ClusterSet]]:
    """Both topologies with a crew each; everything stopped afterwards."""
    single, (clustered, cluster) = _single(), (None, None)
    crews: list[Crew] = []
    try:
        clustered, cluster = _cluster()
        queues = balanced_queues(cluster)
        size = max(sizes.processes)
        crews = [Crew(t, queues, size, sizes.many_batch) for t in (single, clustered)]
        yield queues, crews, cluster
    finally:
        for crew in crews:
            crew.close()
        single.masters[0].cleanup()
        if cluster is not None:
            cluster.cleanup()


def cluster(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    own = SMOKE_SIZES if sizes == SMOKE else ClusterSizes()
    measurements: list[Measurement] = []
    memory: dict[str, dict[str, float]] = {}
    with topologies(own) as (queues, crews, cluster):
        masters = cluster.masters()
        for load, jobs in (("delay_for", own.delay_for), ("delay_many", own.delay_many)):
            for processes in own.processes:
                for crew in crews:  # 1 master, then 3, for each P: any drift hits both
                    crew.topology.flush()
                    measurements.append(crew.run(load, processes, jobs))
        for processes in own.processes:
            for crew in crews:
                crew.topology.flush()
                before = crew.topology.used_memory()
                # all due now, written by every member
                filled = crew.run("fill", max(own.processes), own.claim).jobs
                after = crew.topology.used_memory()
                memory.setdefault(crew.topology.name, {
                    f"{k}_bytes_per_job": (after[k] - v) / filled for k, v in before.items()
                })  # fmt: skip
                claimed = crew.run("claim", processes, 0)
                if claimed.jobs != filled:
                    raise RuntimeError(f"claimed {claimed.jobs} of {filled} due jobs")
                measurements.append(claimed)
        for crew in crews:
            crew.topology.flush()
        if cluster.masters() != masters:  # the CPU read per node would be another node's
            raise RuntimeError(f"a master failed over during the run: {cluster.masters()}")
    print_cpu_table(measurements, queues)
    return figures(measurements, memory, own)


def figures(
    measurements: list[Measurement], memory: dict[str, dict[str, float]], sizes: ClusterSizes
) -> list[Figure]:
    found = {(m.topology, m.load, m.processes): m for m in measurements}
    labels = {"delay_for": "delay_for", "delay_many": f"delay_many ×{sizes.many_batch:,}",
              "claim": "claim pass"}  # fmt: skip
    result = []
    for load, label in labels.items():
        for processes in sizes.processes:
            one = found[("1 master", load, processes)]
            three = found[(f"{MASTERS} masters", load, processes)]
            who = "claimers" if load == "claim" else "producers"
            detail = {m.topology: {**asdict(m), **m.split()} for m in (one, three)}
            result.append(Figure(
                "cluster", f"{MASTERS} masters: {label}, {processes} {who}",
                three.rate, "jobs/s", "1 master", one.rate, detail=detail,
            ))  # fmt: skip
    single, clustered = memory["1 master"], memory[f"{MASTERS} masters"]
    result.append(Figure(
        "cluster", f"{MASTERS} masters: Redis bytes per job (int arg, no key)",
        clustered["masters_bytes_per_job"], "B/job", "1 master",
        single["masters_bytes_per_job"], detail={"1 master": single, "3 masters": clustered},
    ))  # fmt: skip
    return result


def print_cpu_table(measurements: list[Measurement], queues: list[str]) -> None:
    cores = measurements[0].cores
    table = Table(
        title=f"cluster: where the CPU went ({cores} cores; core-seconds during each measurement)",
        caption=f"queues {', '.join(queues)}: {QUEUES_PER_MASTER} per master of the cluster",
    )
    columns = ("load", "processes", "topology", "jobs/s", "wall s", "available", "busy",
               "clients", "Redis masters", "replicas", "other", "client µs/job",
               "Redis µs/job")  # fmt: skip
    for name in columns:
        table.add_column(name, justify="left" if name in ("load", "topology") else "right")
    for m in measurements:
        s = m.split()
        table.add_row(
            m.load, str(m.processes), m.topology, f"{m.rate:,.0f}", f"{m.seconds:.2f}",
            f"{s['available']:.2f}", f"{s['busy']:.2f}", f"{s['clients']:.2f}",
            f"{s['redis_masters']:.2f}", f"{s['redis_replicas']:.2f}", f"{s['other']:.2f}",
            f"{s['client_us_per_job']:.1f}", f"{s['redis_us_per_job']:.1f}",
        )  # fmt: skip
    console = Console(width=170)
    console.print(table)
    noisy = [m for m in measurements if m.split()["other"] > NOISY * m.split()["available"]]
    if noisy:
        console.print(
            f"[red]{len(noisy)} measurement(s) shared the machine: 'other' took more than "
            f"{NOISY:.0%} of the cores (another program ran); run again on a quiet machine.[/]"
        )
