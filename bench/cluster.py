"""Scenario ``cluster``: enqueue and claim throughput on one redis-server against a Redis
Cluster of three masters (each with a replica, as production runs it), with 1, 2 and 4
producer (or claimer) processes, and where the CPU went meanwhile.

    python -m bench --only cluster [--smoke]

Three topologies are started here, on free ports, and serve the same 12 queues: 4 on each
master of the cluster (names picked by their slot), all 12 on a single server. The single
server runs twice: alone (``1 master``, the goal's baseline: the cluster's ``delay_for`` at
0.9× its rate or more) and with a replica (``1 master + 1 replica``), so that what
replication costs (1 master + 1 replica against 1 master) is seen apart from what sharding
costs (3 masters, each with its replica, against 1 master + 1 replica). Each process is a
fresh interpreter (multiprocessing's spawn) with Django set up on one topology; it waits,
connected and warmed up, until every process of the measurement is ready.

- ``delay_for``: ``delayqueue.enqueue(task, (i,), delay=..., queue=q)`` per job, the queues
  in turn (the latency path: one round trip per job).
- ``delay_many``: ``delay_many`` of ``spec()``\\ s in batches of 1,200 jobs, 100 per queue
  (one pipeline per batch; on the cluster one per master).
- ``claim``: the delay worker's pass (reap + claim on every queue in one round trip, the rows
  decoded: ``bench.throughput.ClaimOnly``) over jobs all due, dispatch to Celery left out.

CPU: each process measures its own (``time.process_time``), each redis-server's is read from
``/proc/<pid>/stat`` and the machine's from ``/proc/stat`` before and after. Once the
processes keep every core busy, the rate is the cores over the CPU of a job, the producers'
and the redis-servers' ("cores' bound"): a topology whose servers spend more CPU per job
leaves less of the cores to the producers, whatever the client does. Not in the default
run (``python -m bench`` runs the scenarios of ``SCENARIOS``): it starts nine more
redis-servers and twelve processes.
"""

from __future__ import annotations

import time
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
GOAL = 0.9  # delay_for on the cluster against one master (issue 34)
SINGLE, REPLICATED, CLUSTERED = "1 master", "1 master + 1 replica", f"{MASTERS} masters"


@dataclass(frozen=True)
class ClusterSizes:
    processes: tuple[int, ...] = (1, 2, 4)  # producers (and claimers) per measurement
    delay_for: int = 20_000  # jobs per measurement, shared by its processes
    delay_many: int = 120_000
    many_batch: int = 1_200  # 100 per queue
    claim: int = 120_000


SMOKE_SIZES = ClusterSizes(processes=(2,), delay_for=600, delay_many=12_000, claim=12_000)


# ---- the two topologies ----------------------------------------------------------------------


def _single(*, replica: bool = False) -> Topology:
    """One redis-server; with ``replica``, a replica of it too, in sync before this returns
    (the cluster's nodes' replication options)."""
    server = RedisServer(
        extra=["--maxmemory-policy", "noeviction", "--repl-diskless-sync-delay", "0"]
    ).start()
    replicas: list[RedisServer] = []
    try:
        if replica:
            replicas.append(RedisServer(extra=["--replicaof", "127.0.0.1", str(server.port)]))
            replicas[0].start()
            _wait_in_sync(replicas[0])
    except BaseException:
        for made in (server, *replicas):
            made.cleanup()
        raise
    name = REPLICATED if replica else SINGLE
    return Topology(name, server.url, False, [server], replicas, lambda: server.flush(0))


def _wait_in_sync(replica: RedisServer, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while replica.client().info("replication").get("master_link_status") != "up":
        if time.monotonic() > deadline:
            raise RuntimeError(f"the replica on {replica.port} did not sync in {timeout:.0f} s")
        time.sleep(0.05)


def cleanup(topology: Topology) -> None:
    """Stop a single server's processes (a cluster's: ``ClusterSet.cleanup``)."""
    for server in (*topology.masters, *topology.replicas):
        server.cleanup()


def _cluster(*, replicas: bool = True) -> tuple[Topology, ClusterSet]:
    # Redis's default node timeout (the tests' 1 s fails a master over while two cores are
    # saturated: the cluster goes down mid-measurement).
    cluster = ClusterSet(
        masters=MASTERS, replicas_per_master=int(replicas), node_timeout_ms=15_000
    ).start()
    masters = [cluster.server_on(port) for port, _id in cluster.masters()]
    others = [s for s in cluster.servers if s not in masters]
    name = CLUSTERED if replicas else f"{CLUSTERED}, no replicas"
    return Topology(name, cluster.url, True, masters, others, cluster.flush), cluster


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
    """The three topologies with a crew each; everything stopped afterwards."""
    singles: list[Topology] = []
    cluster: ClusterSet | None = None
    crews: list[Crew] = []
    try:
        singles = [_single()]
        singles.append(_single(replica=True))
        clustered, cluster = _cluster()
        queues = balanced_queues(cluster)
        size = max(sizes.processes)
        crews = [Crew(t, queues, size, sizes.many_batch) for t in (*singles, clustered)]
        yield queues, crews, cluster
    finally:
        for crew in crews:
            crew.close()
        for single in singles:
            cleanup(single)
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
                for crew in crews:  # each topology in turn for each P: drift hits all
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
    """For each load and P: the cluster against one master (delay_for's with the goal),
    then the cost of replication (1 master + 1 replica against 1 master) and that of
    sharding (the cluster against 1 master + 1 replica: a replica each on both sides)."""
    found = {(m.topology, m.load, m.processes): m for m in measurements}
    labels = {"delay_for": "delay_for", "delay_many": f"delay_many ×{sizes.many_batch:,}",
              "claim": "claim pass"}  # fmt: skip
    result = []
    for load, label in labels.items():
        for processes in sizes.processes:
            one = found[(SINGLE, load, processes)]
            replicated = found[(REPLICATED, load, processes)]
            three = found[(CLUSTERED, load, processes)]
            who = "claimers" if load == "claim" else "producers"
            detail = {m.topology: {**asdict(m), **m.split()} for m in (one, replicated, three)}
            compared = [Figure(
                "cluster", f"{name}: {label}, {processes} {who}", value.rate, "jobs/s",
                baseline.topology, baseline.rate, detail=detail,
            ) for name, value, baseline in (
                (CLUSTERED, three, one),
                (REPLICATED, replicated, one),  # what replication costs
                (f"{CLUSTERED}, like for like", three, replicated),  # and sharding
            )]  # fmt: skip
            if load == "delay_for":
                compared[0].goal = f"≥ {GOAL}× {SINGLE}"
                compared[0].met = compared[0].ratio >= GOAL
            result += compared
    single, clustered = memory[SINGLE], memory[CLUSTERED]
    result.append(Figure(
        "cluster", f"{CLUSTERED}: Redis bytes per job (int arg, no key)",
        clustered["masters_bytes_per_job"], "B/job", SINGLE,
        single["masters_bytes_per_job"], detail=memory,
    ))  # fmt: skip
    return result


def print_cpu_table(measurements: list[Measurement], queues: list[str]) -> None:
    cores = measurements[0].cores
    table = Table(
        title=f"cluster: where the CPU went ({cores} cores; core-seconds during each measurement)",
        caption=f"queues {', '.join(queues)}: {QUEUES_PER_MASTER} per master of the cluster. "
        f"cores' bound: jobs/s if the clients and redis-servers had the {cores} cores to "
        "themselves (cores / their CPU per job), which 'other' does not disturb much",
    )
    columns = ("load", "processes", "topology", "jobs/s", "wall s", "available", "busy",
               "clients", "Redis masters", "replicas", "other", "client µs/job",
               "Redis µs/job", "cores' bound", f"bound / {SINGLE}'s")  # fmt: skip
    single = {(m.load, m.processes): m.split()["cores_bound"] for m in measurements
              if m.topology == SINGLE}  # fmt: skip
    for name in columns:
        table.add_column(name, justify="left" if name in ("load", "topology") else "right")
    for m in measurements:
        s = m.split()
        table.add_row(
            m.load, str(m.processes), m.topology, f"{m.rate:,.0f}", f"{m.seconds:.2f}",
            f"{s['available']:.2f}", f"{s['busy']:.2f}", f"{s['clients']:.2f}",
            f"{s['redis_masters']:.2f}", f"{s['redis_replicas']:.2f}", f"{s['other']:.2f}",
            f"{s['client_us_per_job']:.1f}", f"{s['redis_us_per_job']:.1f}",
            f"{s['cores_bound']:,.0f}", f"{s['cores_bound'] / single[m.load, m.processes]:.2f}×",
        )  # fmt: skip
    console = Console(width=200)
    console.print(table)
    noisy = [m for m in measurements if m.split()["other"] > NOISY * m.split()["available"]]
    if noisy:
        console.print(
            f"[red]{len(noisy)} measurement(s) shared the machine: 'other' took more than "
            f"{NOISY:.0%} of the cores (another program ran); run again on a quiet machine.[/]"
        )
