"""The processes of the ``cluster`` scenario (bench/cluster.py): each a fresh interpreter
set up on one topology (``Member``), a measurement's set of them started and stopped
together (``Crew``), and what one measurement found (``Measurement``)."""

from __future__ import annotations

import multiprocessing
import os
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from tests.support.redis_server import RedisServer

TICK = os.sysconf("SC_CLK_TCK")


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
        ours = self.client_cpu + sum(self.redis_cpu.values())
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
            # the rate if the clients and the servers had every core and nothing else ran
            "cores_bound": self.cores * self.jobs / ours,
        }


# ---- the scenario ----------------------------------------------------------------------------
