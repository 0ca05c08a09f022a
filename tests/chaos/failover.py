"""Failover chaos: delayqueue's Redis master is SIGKILLed while producers schedule jobs and the
delay workers and the Celery worker claim, dispatch and ack them; then every job is
accounted for.

Topologies (tests/support/topologies.py): a Sentinel set, whose sentinels promote the replica, or a
Redis Cluster, where the replica of the master holding the queue's slot takes over. The
killed server is started again at once as a replica of the new master (what a supervisor
does), so the next kill, and durable writes, have a replica again. The Celery broker and
the ledger of runs stay single redis-servers of their own (Celery has no Cluster
transport). Processes: a Celery worker (prefork, 2) and two delay workers, started as in
tests/chaos/scenarios.py, with DELAYQUEUE laid over by ``DQ_CHAOS_DELAYQUEUE``.

Producers (threads of this process) call ``chaos_job.delay_for(tag, key=tag)``, one job a
call, due ``MIN_DELAY``-``MIN_DELAY + spread`` s later. A call that raises is sent again
with the same key for up to ``RETRY_WINDOW`` s, as a caller would, then the job is given up.
A job is *acknowledged* once a call for it returned. After the producers stop, the run goes
on until every acknowledged job has run or the deadline passes, and then counts:

- lost: acknowledged, never ran, and neither pending nor dead on the current master;
- duplicates: jobs that ran more than once;
- unacknowledged calls (calls that raised) and, of the jobs given up, how many ran anyway
  (the call wrote them before it failed) and how many did not.

Replication is asynchronous: without DURABLE a failover can lose acknowledged writes, and
this measures how many. On a quiet loopback the replica is a fraction of a millisecond
behind and a plain kill rarely loses any; ``replica_lag`` makes the replica fall behind for
that long before the kill (see ``kill_master``), the case WAIT is for. With ``durable``
(DELAYQUEUE["DURABLE"] in the producers and in every worker process) each write waits for
a replica before it returns, and none may be lost.

Short form: tests/delay_worker/test_chaos.py. Long form: ``python -m tests.long_run --failover``, or
``python -m tests.chaos.failover --minutes N``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import redis

from delayqueue.engine.keys import queue_keys
from tests.chaos.scenarios import DELAY_WORKER_ARGS, OVERRIDE_ENV, QUEUE, Child, celery_worker_child
from tests.support.processes import child_env
from tests.support.redis_server import RedisServer
from tests.support.topologies import MASTER_NAME, ClusterSet, SentinelSet

MIN_DELAY = 2.5  # s: longer than a retry takes, so a retry finds its own first write
RETRY_WINDOW = 1.0  # s a producer keeps sending one job again before it gives it up
SOCKET_TIMEOUT = 1.0
DELAY_WORKERS = 2

Topology = Literal["sentinel", "cluster"]


# ---- the topologies under delayqueue -------------------------------------------------------


class SentinelTarget:
    """delayqueue on a Sentinel set; a kill is the master's, the replica is promoted."""

    def __init__(self) -> None:
        self.set = SentinelSet()

    def start(self) -> None:
        self.set.start()

    def delayqueue_settings(self) -> dict[str, Any]:
        return {"REDIS_URL": self.set.url, "SENTINEL_MASTER": MASTER_NAME, "REDIS_CLUSTER": False}

    def client(self) -> redis.Redis:
        """The current master (a plain client: what it holds, no failover of its own)."""
        return self.set.master_client()

    def master(self) -> RedisServer:
        assert self.set.master is not None
        return self.set.master

    def replica(self) -> RedisServer:
        """The master's replica (the one server besides it that runs)."""
        (replica,) = [s for s in self.set.servers if s is not self.set.master and s.process]
        return replica

    def kill(self, master: RedisServer, replica: RedisServer) -> float:
        """SIGKILL the master; once ``replica`` is promoted, the seconds that took."""
        assert self.set.kill_master_only() is master
        new, seconds = self.set.wait_for_failover()
        assert new is replica
        return seconds

    def rejoin(self, old: RedisServer, timeout: float = 30.0) -> None:
        """Start the killed server again as a replica of the new master; return once it is
        in sync and every sentinel sees it up."""
        master = self.set.master
        assert master is not None
        fast_sync = ["--repl-diskless-sync-delay", "0"]
        old.extra = [*fast_sync, "--replicaof", "127.0.0.1", str(master.port)]
        old.start()

        def problems() -> list[str]:
            found = []
            with master.client() as client:
                replication = client.info("replication")
            online = [value for key, value in replication.items() if key.startswith("slave")
                      and isinstance(value, dict) and value.get("state") == "online"]  # fmt: skip
            if not any(int(value["port"]) == old.port for value in online):
                found.append(f"{old.port} not in sync")
            for sentinel in self.set.sentinels:
                with sentinel.client() as client:
                    replicas = client.sentinel_slaves(MASTER_NAME)
                if not [r for r in replicas if int(r["port"]) == old.port and not r["is_sdown"]]:
                    found.append(f"sentinel {sentinel.port} does not see {old.port} up")
            return found

        _wait(problems, timeout, "the killed master did not rejoin")

    def cleanup(self) -> None:
        self.set.cleanup()


class ClusterTarget:
    """delayqueue on a Redis Cluster; a kill is the master of the queue's slot's, its replica
    takes over. REDIS_URL names a node of another slot range, which no kill touches (the
    cluster client finds the others from any node, but needs that one up when it starts)."""

    def __init__(self) -> None:
        self.set = ClusterSet()
        self.key = queue_keys(QUEUE).scheduled
        self.url = ""

    def start(self) -> None:
        self.set.start()
        victim = self.set.master_of(self.key).port
        other = next(port for port, _id in self.set.masters() if port != victim)
        self.url = self.set.server_on(other).url

    def delayqueue_settings(self) -> dict[str, Any]:
        return {"REDIS_URL": self.url, "REDIS_CLUSTER": True, "SENTINEL_MASTER": None}

    def client(self) -> redis.Redis:
        return cast(redis.Redis, self.set.client())  # a RedisCluster: the same reads

    def master(self) -> RedisServer:
        """The master of the queue's slot."""
        return self.set.master_of(self.key)

    def replica(self) -> RedisServer:
        """The replica of the master of the queue's slot."""
        master = self.set.master_of(self.key)
        master_id = self.set.node_ids[master.port]
        (port,) = [p for p in self.set.node_ids if _cluster_nodes(master)[p][1] == master_id]
        return self.set.server_on(port)

    def kill(self, master: RedisServer, replica: RedisServer, timeout: float = 30.0) -> float:
        """SIGKILL the master of the queue's slot; once every running node is ok, sees it
        failed and ``replica`` a master, the seconds that took. (``ClusterSet.kill_master``
        waits for the same, but first asks the first node for the slot map: the replica,
        frozen by ``kill_master`` below, when the queue's slot is the first node's.)"""
        started = time.monotonic()
        master.stop(kill=True)

        def problems() -> list[str]:
            found = []
            for server in self.set.servers:
                if server.process is None:
                    continue
                with server.client() as client:
                    state = client.cluster("INFO")["cluster_state"]
                nodes = _cluster_nodes(server)
                if state != "ok" or "fail" not in nodes[master.port][0]:
                    found.append(f"{server.port}: {state}, {master.port} {nodes[master.port]}")
                if "master" not in nodes[replica.port][0]:
                    found.append(f"{server.port} sees {replica.port} {nodes[replica.port]}")
            return found

        _wait(problems, timeout, f"no failover of {master.port}")
        return time.monotonic() - started

    def rejoin(self, old: RedisServer, timeout: float = 30.0) -> None:
        """Start the killed node again (its nodes.conf makes it a replica of the node that
        took over); return once it is in sync and every node sees it as a replica."""
        old.start()

        def problems() -> list[str]:
            found = []
            with old.client() as client:
                if client.info("replication").get("master_link_status") != "up":
                    found.append(f"{old.port} not in sync")
            for server in self.set.servers:
                if server.process is None:
                    continue
                flags, _master = _cluster_nodes(server)[old.port]
                if "slave" not in flags or "fail" in flags:
                    found.append(f"{server.port} sees {old.port} as {flags}")
            return found

        _wait(problems, timeout, "the killed master did not rejoin")

    def cleanup(self) -> None:
        self.set.cleanup()


Target = SentinelTarget | ClusterTarget


def _cluster_nodes(server: RedisServer) -> dict[int, tuple[str, str]]:
    """``CLUSTER NODES`` as ``server`` sees it: port -> (flags, its master's id or "-")."""
    with server.client() as client:
        text = str(client.execute_command("CLUSTER", "NODES"))
    nodes = {}
    for line in text.splitlines():
        _id, address, flags, master_id, *_rest = line.split()
        nodes[int(address.split("@")[0].rsplit(":", 1)[1])] = (flags, master_id)
    return nodes


def _wait(problems: Any, timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while True:
        found = problems()
        if not found:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{failure}: {found}")
        time.sleep(0.05)


def kill_master(target: Target, lag: float) -> tuple[RedisServer, float]:
    """SIGKILL the master (``target.kill``); the killed server, and the seconds until its
    replica took over. With ``lag``, the replica falls behind first: it is frozen (SIGSTOP)
    and the master drops its link (CLIENT KILL TYPE replica; the frozen replica cannot
    connect again), ``lag`` s pass, the master is SIGKILLed and the replica thawed. What the
    master took in those ``lag`` s is on no replica: a replica that fell behind (a network
    stall, a slow disk, a full sync), the case WAIT is for. (Freezing the replica alone would
    not do: the kernel keeps what the master sent in the replica's socket, and the replica
    reads it on waking.)"""
    master, replica = target.master(), target.replica()
    if not lag:
        return master, target.kill(master, replica)
    assert replica.process is not None
    pid = replica.process.pid

    def thaw_once_the_master_is_dead() -> None:
        while master.process is not None:  # RedisServer.stop() clears it after the wait
            time.sleep(0.001)
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)

    os.kill(pid, signal.SIGSTOP)
    thaw = threading.Thread(target=thaw_once_the_master_is_dead, name="thaw", daemon=True)
    try:
        with master.client() as client:
            client.execute_command("CLIENT", "KILL", "TYPE", "replica")
        time.sleep(lag)  # the writes the replica misses
        thaw.start()
        return master, target.kill(master, replica)
    finally:
        with suppress(ProcessLookupError):  # whatever happened; a second SIGCONT does nothing
            os.kill(pid, signal.SIGCONT)
        thaw.join(5)


# ---- the rig -------------------------------------------------------------------------------


class FailoverRig:
    """A topology for delayqueue, a broker and a ledger of their own, the Celery worker and
    the delay workers pointed at the topology (DURABLE as ``durable`` says)."""

    def __init__(self, topology: Topology, durable: bool) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dq-failover-"))
        self.target: Target = SentinelTarget() if topology == "sentinel" else ClusterTarget()
        self.durable = durable
        self.broker = RedisServer()
        self.ledger_server = RedisServer()
        self.celery: Child | None = None
        self.delay: list[Child] = []

    def delayqueue_settings(self) -> dict[str, Any]:
        return {
            **self.target.delayqueue_settings(),
            "SOCKET_TIMEOUT": SOCKET_TIMEOUT,
            "SAFETY_POLL": 2.0,
            "DURABLE": self.durable,
        }

    def __enter__(self) -> FailoverRig:
        try:
            return self._start()
        except BaseException:
            self.__exit__()
            raise

    def _start(self) -> FailoverRig:
        self.target.start()
        for server in (self.broker, self.ledger_server):
            server.start()
        env = child_env(
            DJANGO_SETTINGS_MODULE="tests.settings",
            DQ_TEST_TOPOLOGY="single",  # the settings' own; DQ_CHAOS_DELAYQUEUE replaces it
            DQ_TEST_REDIS_PORT=str(self.broker.port),
            DQ_TEST_REDIS_RUN_ID=str(self.broker.run_id),
            DQ_TEST_DIR=str(self.dir),
            DQ_TEST_BROKER_URL=self.broker.url,
            DQ_CHAOS_LEDGER_URL=self.ledger_server.url,
            DQ_CHAOS_ACK_EMULATION="1",
            **{OVERRIDE_ENV: json.dumps(self.delayqueue_settings())},
        )
        self.celery = celery_worker_child(env, self.dir)
        for n in range(DELAY_WORKERS):
            self.delay.append(
                Child(f"delay worker {n}", DELAY_WORKER_ARGS, env, self.dir / f"delay{n}.log")
            )
        self.celery.start()
        for child in self.delay:
            child.start()
        self.celery.wait_ready("ready.")
        for child in self.delay:
            child.wait_ready("starting")
        return self

    def __exit__(self, *exc: object) -> None:
        for child in [*self.delay, self.celery]:
            if child is not None:
                child.stop()
        for server in (self.broker, self.ledger_server):
            server.cleanup()
        self.target.cleanup()

    def down(self) -> list[str]:
        """The worker processes that died."""
        return [c.name for c in [*self.delay, self.celery] if c is not None and not c.alive()]

    def logs(self) -> str:
        parts = []
        for path in sorted(self.dir.glob("*.log")):
            parts.append(f"--- {path.name} (tail)\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(parts)


@contextmanager
def delayqueue_on(config: dict[str, Any]) -> Iterator[None]:
    """This process's delayqueue client with ``config`` laid over DELAYQUEUE."""
    from django.conf import settings
    from django.test import override_settings

    from delayqueue.engine import clients

    with override_settings(DELAYQUEUE={**getattr(settings, "DELAYQUEUE", {}), **config}):
        clients.reset()
        try:
            yield
        finally:
            clients.reset()


# ---- producers -----------------------------------------------------------------------------


@dataclass
class Produced:
    """What the producers were told, shared by their threads (appends and item sets only)."""

    acknowledged: dict[str, tuple[str, float]] = field(default_factory=dict)  # tag -> id, when
    given_up: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)  # raised calls, by class
    foreign: list[str] = field(default_factory=list)  # errors that are not delayqueue's
    samples: dict[str, str] = field(default_factory=dict)  # class -> its first message
    successes: list[tuple[float, float]] = field(default_factory=list)  # call start, end


def produce(produced: Produced, prefix: str, rate: float, until: float, spread: float) -> None:
    """Schedule ``rate`` jobs a second until ``until`` (monotonic), one call per job, each
    raised call sent again with the same key for up to RETRY_WINDOW s."""
    from delayqueue import DelayQueueError
    from tests.support.chaos_tasks import chaos_job

    started = time.monotonic()
    n = 0
    while time.monotonic() < until:
        tag = f"{prefix}-{n:06d}"
        n += 1
        delay = random.uniform(MIN_DELAY, MIN_DELAY + spread)
        first = time.monotonic()
        while True:
            call = time.monotonic()
            try:
                job = chaos_job.delay_for(tag, 0, seconds=delay, key=tag, on_commit=False)
            except Exception as exc:
                produced.errors[type(exc).__name__] += 1
                produced.samples.setdefault(type(exc).__name__, str(exc)[:300])
                if not isinstance(exc, DelayQueueError):
                    produced.foreign.append(repr(exc))
                if time.monotonic() - first >= RETRY_WINDOW:
                    produced.given_up.add(tag)
                    break
                time.sleep(0.1)
                continue
            done = time.monotonic()
            produced.successes.append((call, done))
            produced.acknowledged[tag] = (job.id, done)
            break
        time.sleep(max(0.0, started + n / rate - time.monotonic()))


# ---- scenarios and accounting --------------------------------------------------------------


@dataclass
class FailoverScenario:
    name: str
    topology: Topology
    durable: bool
    kills: int = 1
    seconds: float = 8.0  # of producing
    first_kill: float = 3.0  # s into the run
    kill_gap: float = 15.0  # s between kills (a sentinel waits 2 x failover-timeout to retry)
    rate: float = 100.0  # jobs a second, over all producers
    producers: int = 2
    spread: float = 2.5  # due MIN_DELAY .. MIN_DELAY + spread s after the call
    replica_lag: float = 0.0  # s the replica is frozen before each kill (see kill_master)


@dataclass
class FailoverAccounting:
    scenario: str
    acknowledged: int = 0
    executed: int = 0
    lost: int = 0
    duplicated: int = 0  # jobs run more than once
    extra_runs: int = 0
    pending: int = 0
    dead: int = 0
    unacknowledged_calls: int = 0
    given_up: int = 0  # jobs whose every call raised
    given_up_ran: int = 0
    given_up_not_run: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    foreign_errors: list[str] = field(default_factory=list)
    error_samples: dict[str, str] = field(default_factory=dict)  # class -> a message
    promoted_s: list[float] = field(default_factory=list)  # SIGKILL -> failover done
    writes_back_s: list[float] = field(default_factory=list)  # SIGKILL -> first write after
    lost_ms_before_kill: list[int] = field(default_factory=list)  # when lost jobs were acked
    workers_down: list[str] = field(default_factory=list)
    seconds: float = 0.0
    lost_tags: list[str] = field(default_factory=list)

    def line(self) -> str:
        promoted = ", ".join(f"{s:.1f}" for s in self.promoted_s)
        back = ", ".join(f"{s:.1f}" for s in self.writes_back_s)
        return (
            f"{self.scenario}: {self.acknowledged} acknowledged, {self.lost} lost, "
            f"{self.duplicated} run twice or more, {self.pending} pending, {self.dead} dead; "
            f"{self.unacknowledged_calls} unacknowledged calls {self.errors or ''}, "
            f"{self.given_up} jobs given up ({self.given_up_ran} ran anyway, "
            f"{self.given_up_not_run} not run); failover {promoted} s, writes back after "
            f"{back} s; {self.seconds:.0f} s"
        )


def run_failover(scenario: FailoverScenario, settle: float = 60.0) -> FailoverAccounting:
    """Run one scenario: produce for ``scenario.seconds`` while the master is killed
    ``scenario.kills`` times, then wait for the acknowledged jobs and count."""
    started = time.monotonic()
    with FailoverRig(scenario.topology, scenario.durable) as rig:
        produced = Produced()
        kills: list[tuple[float, float]] = []  # monotonic time of the SIGKILL, promotion s
        fault_errors: list[BaseException] = []
        stop = threading.Event()

        def break_masters() -> None:
            try:
                for n in range(scenario.kills):
                    at = run_start + scenario.first_kill + n * scenario.kill_gap
                    if stop.wait(max(0.0, at - time.monotonic())):
                        return
                    old, seconds = kill_master(rig.target, scenario.replica_lag)
                    # the SIGKILL itself: kill() looks at the topology a moment first
                    kills.append((time.monotonic() - seconds, seconds))
                    rig.target.rejoin(old)
            except BaseException as exc:  # re-raised by the main thread
                fault_errors.append(exc)

        with delayqueue_on(rig.delayqueue_settings()):
            run_start = time.monotonic()
            until = run_start + scenario.seconds
            fault = threading.Thread(target=break_masters, name="failover", daemon=True)
            producers = [
                threading.Thread(
                    target=produce,
                    args=(
                        produced,
                        f"p{n}",
                        scenario.rate / scenario.producers,
                        until,
                        scenario.spread,
                    ),
                    name=f"producer {n}",
                )  # fmt: skip
                for n in range(scenario.producers)
            ]
            fault.start()
            for thread in producers:
                thread.start()
            for thread in producers:
                thread.join()
            fault.join(120)
            stop.set()
        if fault_errors:
            raise RuntimeError(f"the failover itself failed\n{rig.logs()}") from fault_errors[0]
        result = account(rig, scenario.name, produced, settle)
        for when, seconds in kills:
            result.promoted_s.append(seconds)
            after = [end for call, end in produced.successes if call >= when]
            result.writes_back_s.append(min(after, default=float("nan")) - when)
            if result.lost:
                acked = [produced.acknowledged[tag][1] for tag in result.lost_tags]
                result.lost_ms_before_kill += [round((when - t) * 1000) for t in acked]
        result.workers_down = rig.down()
        result.seconds = time.monotonic() - started
        if result.lost or result.pending or result.workers_down:
            print(rig.logs(), file=sys.stderr)
    return result


def account(rig: FailoverRig, name: str, produced: Produced, settle: float) -> FailoverAccounting:
    """Wait until every acknowledged job ran or nothing is left to run (the queue holds
    nothing scheduled or in flight: a lost job never runs), at most ``settle`` s; then until
    the queue is empty, at most 10 s more (runs of reaped jobs, the duplicates, show up);
    then count. A run is recorded before its ack takes the job off the queue."""
    from tests.support.chaos_tasks import RUNS

    ledger = rig.ledger_server.client()
    dq = rig.target.client()
    keys = {zset: queue_keys(QUEUE).of_state(zset) for zset in ("scheduled", "inflight", "dead")}

    def busy() -> bool:
        return bool(dq.zcard(keys["scheduled"]) or dq.zcard(keys["inflight"]))

    deadline = time.monotonic() + settle
    acknowledged = produced.acknowledged
    while time.monotonic() < deadline:
        ran = ledger.hgetall(RUNS)
        if all(tag in ran for tag in acknowledged) or not busy():
            break
        time.sleep(0.2)
    quiet_until = min(deadline, time.monotonic() + 10)
    while time.monotonic() < quiet_until and busy():
        time.sleep(0.2)

    def holds(zset: str, job_id: str) -> bool:
        return dq.zscore(keys[zset], job_id) is not None

    runs = {tag: int(count) for tag, count in ledger.hgetall(RUNS).items()}
    result = FailoverAccounting(name, acknowledged=len(acknowledged))
    for tag, (job_id, _when) in acknowledged.items():
        count = runs.get(tag, 0) or int(ledger.hget(RUNS, tag) or 0)  # a run since the read
        if count:
            result.executed += 1
            if count > 1:
                result.duplicated += 1
                result.extra_runs += count - 1
        elif holds("dead", job_id):
            result.dead += 1
        elif holds("scheduled", job_id) or holds("inflight", job_id):
            result.pending += 1
        else:
            result.lost += 1
            result.lost_tags.append(tag)
    for tag in produced.given_up:
        if runs.get(tag):
            result.given_up_ran += 1
            if runs[tag] > 1:
                result.duplicated += 1
        else:
            result.given_up_not_run += 1
    result.given_up = len(produced.given_up)
    result.unacknowledged_calls = sum(produced.errors.values())
    result.errors = dict(produced.errors)
    result.foreign_errors = produced.foreign[:10]
    result.error_samples = dict(produced.samples)
    dq.close()
    return result


def print_failover_table(results: list[FailoverAccounting]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="delayqueue failover chaos accounting")
    columns = ["scenario", "acked", "executed", "lost", "dup jobs", "pending", "dead"]
    columns += ["unacked calls", "given up: ran / not run", "failover s", "writes back s", "s"]
    for column in columns:
        table.add_column(column, justify="left" if column == "scenario" else "right")
    for r in results:
        table.add_row(
            r.scenario,
            str(r.acknowledged),
            str(r.executed),
            f"[bold {'red' if r.lost else 'green'}]{r.lost}[/]",
            str(r.duplicated),
            str(r.pending),
            str(r.dead),
            str(r.unacknowledged_calls),
            f"{r.given_up_ran} / {r.given_up_not_run}",
            ", ".join(f"{s:.1f}" for s in r.promoted_s),
            ", ".join(f"{s:.1f}" for s in r.writes_back_s),
            f"{r.seconds:.0f}",
        )
    Console(width=200).print(table)


# The short form (tests/delay_worker/test_chaos.py): one kill each, the replica 0.5 s behind
# (what the master took meanwhile is on no replica): durable on each topology, and the
# control without DURABLE, which shows the harness sees what a failover loses.
LAG = 0.5
SHORT = [
    FailoverScenario("Sentinel, replica behind, durable", "sentinel", True, replica_lag=LAG),
    FailoverScenario("Cluster, replica behind, durable", "cluster", True, replica_lag=LAG),
    FailoverScenario("Sentinel, replica behind, async", "sentinel", False, replica_lag=LAG),
]


def long_scenarios(minutes: float) -> list[FailoverScenario]:
    """Each topology with and without DURABLE, with the replica in step and behind, several
    kills each: 8 scenarios in ``minutes``."""
    each = max(30.0, minutes * 60 / 8 - 20)  # s of producing; ~20 s of setup and settling
    kills = int((each - 3.0 - 5.0) // 15.0) + 1  # at 3 s, then every 15 s, 5 s before the end
    topologies: tuple[Topology, ...] = ("sentinel", "cluster")
    return [
        FailoverScenario(
            f"{topology.capitalize()} x{kills}{', replica behind' if lag else ''}, "
            f"{'durable' if durable else 'async'}",
            topology,
            durable=durable,
            kills=kills,
            seconds=each,
            rate=150.0,
            spread=5.0,
            replica_lag=lag,
        )
        for topology in topologies
        for lag in (0.0, LAG)
        for durable in (False, True)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.failover", description=__doc__)
    parser.add_argument("--minutes", type=float, default=8.0, help="in all (8 scenarios)")
    parser.add_argument("--only", help="run only scenarios whose name contains this")
    options = parser.parse_args(argv)
    from tests.chaos.scenarios import _setup_django

    _setup_django()
    import tests.support.chaos_tasks  # noqa: F401

    logging.getLogger("delayqueue").setLevel(logging.WARNING)  # not a line per job

    chosen = [
        s for s in long_scenarios(options.minutes)
        if not options.only or options.only.lower() in s.name.lower()
    ]  # fmt: skip
    results = []
    for scenario in chosen:
        print(f"running {scenario.name!r}: {scenario.seconds:.0f} s ...", flush=True)
        results.append(run_failover(scenario))
        print(results[-1].line(), flush=True)
        for kind, message in results[-1].error_samples.items():
            print(f"  {kind}: {message}", flush=True)
        print_failover_table(results)
    failed = [
        r for s, r in zip(chosen, results, strict=True)
        if r.workers_down or r.foreign_errors or (r.lost and s.durable)
    ]  # fmt: skip
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
