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

import multiprocessing
import os
import random
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.env import BenchEnv
from bench.report import Figure
from bench.throughput import SMOKE, Sizes
from tests.support.redis_server import RedisServer
from tests.support.topologies import ClusterSet

QUEUES_PER_MASTER = 4
MASTERS = 3
TICK = os.sysconf("SC_CLK_TCK")
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


@dataclass
class Topology:
    name: str
    url: str
    cluster: bool
    masters: list[RedisServer]
    replicas: list[RedisServer]
    flush: Callable[[], None]

    def cpu_seconds(self) -> dict[str, float]:
        return {
            "masters": sum(_process_cpu(s) for s in self.masters),
            "replicas": sum(_process_cpu(s) for s in self.replicas),
        }

    def used_memory(self) -> dict[str, int]:
        def total(servers: list[RedisServer]) -> int:
            return sum(int(s.client().info("memory")["used_memory"]) for s in servers)

        return {"masters": total(self.masters), "replicas": total(self.replicas)}


def _process_cpu(server: RedisServer) -> float:
    """User + system seconds of a redis-server (all its threads), from /proc/<pid>/stat."""
    assert server.process is not None
    stat = Path(f"/proc/{server.process.pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after the command name: field 3 onwards
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def _machine_busy() -> float:
    """CPU seconds the whole machine spent busy (every core), from /proc/stat."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]
    )
    return (user + nice + system + irq + softirq + steal) / TICK


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


@dataclass(frozen=True)
class Run:
    """What one process reports of its part of a measurement."""

    started: float  # time.monotonic(): one clock for every process of the machine
    ended: float
    cpu: float  # its user + system seconds meanwhile
    jobs: int


def _serve(url: str, cluster: bool, queues: list[str], conn: Connection) -> None:
    """A child process: Django on ``url``; runs the commands the parent sends, each as
    (load, jobs, first number, batch) -> "ready" when warmed up -> "go" -> its Run, until
    None."""
    import django

    django.setup()
    from django.test.utils import override_settings

    override_settings(
        DELAYQUEUE={"REDIS_URL": url, "REDIS_CLUSTER": cluster, "SAFETY_POLL": 5.0}
    ).enable()
    member = Member(queues)
    while (command := conn.recv()) is not None:
        try:
            work = member.prepare(*command)
            conn.send("ready")
            conn.recv()  # "go"
            started, cpu = time.monotonic(), time.process_time()
            jobs = work()
            conn.send(Run(started, time.monotonic(), time.process_time() - cpu, jobs))
        except Exception:
            conn.send(traceback.format_exc())


class Member:
    """What a child process does, connected and warmed up before the first measurement."""

    def __init__(self, queues: list[str]) -> None:
        from bench.throughput import ClaimOnly, _noop
        from delayqueue.producer import api

        self.api, self.noop, self.queues = api, _noop(), queues
        for queue in queues:  # connect, load the script on every master, remember the queues
            api.enqueue(self.noop, (0,), delay=3_600, queue=queue, on_commit=False)
        self.worker = ClaimOnly(queues)
        self.worker.run_pass()  # nothing due yet: connects and loads the reap, claim scripts

    def prepare(self, load: str, count: int, first: int, batch: int) -> Callable[[], int]:
        """The work of one measurement: ``count`` jobs of ``load``, numbered from ``first``
        (``claim``: every due job)."""
        if load == "delay_for":
            return lambda: self.delay_for(first, count)
        if load in ("delay_many", "fill"):
            return lambda: self.delay_many(first, count, batch, due_now=load == "fill")
        if load == "claim":
            self.worker.claimed = 0
            return self.claim
        raise ValueError(f"unknown load {load!r}")

    def delay_for(self, first: int, count: int) -> int:
        enqueue, noop, queues = self.api.enqueue, self.noop, self.queues
        for i in range(first, first + count):
            enqueue(noop, (i,), delay=3_600 + i % 3_600, queue=queues[i % len(queues)],
                    on_commit=False)  # fmt: skip
        return count

    def delay_many(self, first: int, count: int, batch: int, *, due_now: bool) -> int:
        spec, noop, queues = self.api.spec, self.noop, self.queues
        for start in range(first, first + count, batch):
            specs = [
                spec(noop, (i,), delay=0 if due_now else 3_600 + random.random() * 3_600,
                     queue=queues[i % len(queues)])
                for i in range(start, min(first + count, start + batch))
            ]  # fmt: skip
            self.api.delay_many(specs, on_commit=False)
        return count

    def claim(self) -> int:
        while True:
            before = self.worker.claimed
            self.worker.run_pass()
            if self.worker.claimed == before:
                return self.worker.claimed


class Crew:
    """``size`` child processes on one topology, reused by every measurement on it."""

    def __init__(self, topology: Topology, queues: list[str], size: int, batch: int) -> None:
        self.topology = topology
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no shared socket
        self.batch = batch
        self.members: list[tuple[BaseProcess, Connection]] = []
        for _ in range(size):
            parent_end, child_end = context.Pipe()
            process = context.Process(
                target=_serve, args=(topology.url, topology.cluster, queues, child_end),
                daemon=True,
            )  # fmt: skip
            process.start()
            self.members.append((process, parent_end))

    def run(self, load: str, processes: int, jobs: int) -> Measurement:
        """``jobs`` of ``load`` shared by ``processes`` members, started together; the CPU
        of the redis-servers and of the machine from the start to the last reply."""
        crew = self.members[:processes]
        share = jobs // processes
        for index, (_process, conn) in enumerate(crew):
            conn.send((load, share, index * share, self.batch))
        for _process, conn in crew:
            self._reply(conn)  # "ready"
        redis_before, machine_before = self.topology.cpu_seconds(), _machine_busy()
        for _process, conn in crew:
            conn.send("go")
        runs: list[Run] = [self._reply(conn) for _process, conn in crew]
        redis_after, machine_after = self.topology.cpu_seconds(), _machine_busy()
        seconds = max(r.ended for r in runs) - min(r.started for r in runs)
        return Measurement(
            topology=self.topology.name,
            load=load,
            processes=processes,
            jobs=sum(r.jobs for r in runs),
            seconds=seconds,
            client_cpu=sum(r.cpu for r in runs),
            redis_cpu={k: redis_after[k] - v for k, v in redis_before.items()},
            machine_busy=machine_after - machine_before,
        )

    @staticmethod
    def _reply(conn: Connection) -> Any:
        if not conn.poll(600):
            raise RuntimeError("benchmark: a cluster-scenario process did not answer in 600 s")
        reply = conn.recv()
        if isinstance(reply, str) and reply != "ready":
            raise RuntimeError(f"a cluster-scenario process failed:\n{reply}")
        return reply

    def close(self) -> None:
        for process, conn in self.members:
            if process.is_alive():
                conn.send(None)
        for process, _conn in self.members:
            process.join(10)
            if process.is_alive():
                process.kill()


@dataclass
class Measurement:
    topology: str
    load: str
    processes: int
    jobs: int
    seconds: float
    client_cpu: float  # the producers' (claimers') CPU seconds
    redis_cpu: dict[str, float]  # "masters", "replicas"
    machine_busy: float  # every process's, the benchmark's parent and the OS's included
    cores: int = field(default_factory=lambda: os.cpu_count() or 1)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    def split(self) -> dict[str, float]:
        """Core-seconds of the measurement's wall time: available, busy, and by whom."""
        available = self.cores * self.seconds
        return {
            "available": available,
            "busy": self.machine_busy,
            "clients": self.client_cpu,
            "redis_masters": self.redis_cpu["masters"],
            "redis_replicas": self.redis_cpu["replicas"],
            # the benchmark's parent, the OS, and whatever else runs on the machine
            "other": self.machine_busy - self.client_cpu - sum(self.redis_cpu.values()),
            "client_us_per_job": self.client_cpu / self.jobs * 1e6,
            "redis_us_per_job": sum(self.redis_cpu.values()) / self.jobs * 1e6,
        }


# ---- the scenario ----------------------------------------------------------------------------


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
