"""Redis topologies the tests start themselves, on free loopback ports, with timeouts low
enough that a failover takes a few seconds: a Sentinel set of one master, one replica and three
sentinels (``redis-server <conf> --sentinel``), and a Redis Cluster of three primaries with a
replica each.

    with SentinelSet() as topology:            # or start() ... cleanup() in a fixture
        url = topology.url                     # sentinel://127.0.0.1:p1;...;sentinel://...:p3/0
        topology.kill_master()                 # SIGKILL; returns when a replica is promoted

    with ClusterSet() as cluster:
        client = cluster.client()              # a redis.cluster.RedisCluster
        seconds = cluster.kill_master_of("k")  # SIGKILL; returns when the cluster is ok again

Every process dies with the test process (``PR_SET_PDEATHSIG``), and ``cleanup()`` kills them
and removes their folders, whatever state a failed test left them in. The machine's own Redis
is never touched: every port comes from ``free_port()``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import redis
from redis.cluster import ClusterNode, RedisCluster

from tests.support.redis_server import RedisServer, _die_with_parent, free_port

MASTER_NAME = "mymaster"
QUORUM = 2


class SentinelProcess:
    """One ``redis-server --sentinel``. Sentinel rewrites its config file (the replicas and
    sentinels it learned of, the current epoch), so the file lives in a folder of its own."""

    def __init__(
        self,
        master_port: int,
        *,
        down_after_ms: int,
        failover_timeout_ms: int,
        password: str | None = None,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="dq-sentinel-"))
        self.config = self.dir / "sentinel.conf"
        self.config.write_text(
            f"port {self.port}\n"
            "bind 127.0.0.1\n"
            f"dir {self.dir}\n"
            f"logfile {self.dir / 'sentinel.log'}\n"
            "loglevel notice\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_NAME} {failover_timeout_ms}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 1\n"
        )
        if password is not None:  # clients and the other sentinels must AUTH
            with self.config.open("a") as config:
                config.write(f"requirepass {password}\nsentinel sentinel-pass {password}\n")
        self.password = password
        self.process: subprocess.Popen[bytes] | None = None

    def client(self) -> redis.Redis:
        return redis.Redis(
            port=self.port, password=self.password, decode_responses=True, socket_timeout=10
        )

    def log(self) -> str:
        path = self.dir / "sentinel.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> SentinelProcess:
        self.process = subprocess.Popen(
            [self.binary, str(self.config), "--sentinel"], preexec_fn=_die_with_parent()
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                with self.client() as client:
                    client.ping()
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"sentinel did not start on {self.port}: {self.log()}"
                    ) from None
                time.sleep(0.02)

    def master_address(self) -> tuple[str, int] | None:
        with self.client() as client:
            reply = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
        return (str(reply[0]), int(reply[1])) if reply else None

    def stop(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(10)
            self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelSet:
    """A master, one replica (``replicaof``) and three sentinels with a quorum of two.
    ``sentinel_password``: the sentinels require it (``requirepass``, and use it between
    themselves); the data servers' default user stays open, for the tests to look.

    ``down_after_ms`` is how long the master must be silent before a sentinel thinks it down;
    ``failover_timeout_ms`` bounds a failover attempt (and how soon another may start)."""

    def __init__(
        self,
        *,
        master_name: str = MASTER_NAME,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 5000,
        sentinels: int = 3,
        sentinel_password: str | None = None,
    ) -> None:
        if master_name != MASTER_NAME:
            raise ValueError(f"the sentinels monitor {MASTER_NAME!r}")
        self.master_name = master_name
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.sentinel_count = sentinels
        self.sentinel_password = sentinel_password
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelProcess] = []
        self.master: RedisServer | None = None
        self._killed: tuple[RedisServer, float]  # the master kill_master_only() killed, when

    # ---- addresses -----------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The kombu-style URL delayqueue takes: one ``sentinel://`` part per sentinel."""
        return self.url_for(0)

    def url_for(self, db: int) -> str:
        """The URL of database ``db``, written on the first part (kombu reads it there)."""
        first, *others = [f"sentinel://127.0.0.1:{s.port}" for s in self.sentinels]
        return ";".join([f"{first}/{db}", *others])

    def server_on(self, port: int) -> RedisServer:
        (server,) = [s for s in self.servers if s.port == port]
        return server

    def master_client(self) -> redis.Redis:
        """A plain client of the current master (as the sentinels name it)."""
        if self.master is None:
            raise RuntimeError("the set is not started")
        return self.master.client()

    # ---- life cycle ----------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> SentinelSet:
        try:
            # diskless full sync at once (its default waits 5 s for more replicas)
            fast_sync = ["--repl-diskless-sync-delay", "0"]
            master = RedisServer(extra=fast_sync).start()
            self.servers.append(master)
            self.master = master
            replica = RedisServer(extra=[*fast_sync, "--replicaof", "127.0.0.1", str(master.port)])
            self.servers.append(replica.start())
            for _ in range(self.sentinel_count):
                sentinel = SentinelProcess(
                    master.port,
                    down_after_ms=self.down_after_ms,
                    failover_timeout_ms=self.failover_timeout_ms,
                    password=self.sentinel_password,
                )
                self.sentinels.append(sentinel)
                sentinel.start()
            self._wait_until_settled(timeout)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _wait_until_settled(self, timeout: float) -> None:
        """Until the replica is in sync and every sentinel sees the master, its replica and
        the other sentinels (a failover needs all three)."""
        assert self.master is not None
        deadline = time.monotonic() + timeout
        others = self.sentinel_count - 1
        while True:
            problems = self._problems(others)
            if not problems:
                return
            if time.monotonic() > deadline:
                logs = "\n".join(s.log()[-2000:] for s in self.sentinels)
                raise RuntimeError(f"the Sentinel set did not settle: {problems}\n{logs}")
            time.sleep(0.1)

    def _problems(self, others: int) -> list[str]:
        assert self.master is not None
        problems = []
        with self.master.client() as master:
            replication = master.info("replication")
        online = [v for k, v in replication.items() if k.startswith("slave") and
                  isinstance(v, dict) and v.get("state") == "online"]  # fmt: skip
        if len(online) < len(self.servers) - 1:
            problems.append("replica not in sync")
        for sentinel in self.sentinels:
            with sentinel.client() as client:
                state = client.sentinel_master(MASTER_NAME)
                replicas = client.sentinel_slaves(MASTER_NAME)
            if int(state["port"]) != self.master.port or not state["is_master"]:
                problems.append(f"sentinel {sentinel.port} sees master {state['port']}")
            if int(state["num-other-sentinels"]) < others:
                problems.append(f"sentinel {sentinel.port} sees {state['num-other-sentinels']}")
            if not [r for r in replicas if not (r["is_sdown"] or r["is_odown"])]:
                problems.append(f"sentinel {sentinel.port} sees no replica")
        return problems

    def kill_master(self, timeout: float = 30.0) -> tuple[RedisServer, float]:
        """SIGKILL the master and wait until a replica is promoted (``wait_for_failover``)."""
        self.kill_master_only()
        return self.wait_for_failover(timeout)

    def kill_master_only(self) -> RedisServer:
        """SIGKILL the master and return at once (it is dead when this returns)."""
        if self.master is None:
            raise RuntimeError("the set is not started")
        self._killed = (self.master, time.monotonic())
        self.master.stop(kill=True)
        return self._killed[0]

    def wait_for_failover(self, timeout: float = 30.0) -> tuple[RedisServer, float]:
        """Wait until every sentinel names a new master and that one takes writes; the new
        master and the seconds since the SIGKILL."""
        old, started = self._killed
        deadline = time.monotonic() + timeout
        while True:
            addresses = {s.master_address() for s in self.sentinels}
            if len(addresses) == 1:
                (address,) = addresses
                if address is not None and address[1] != old.port:
                    new = self.server_on(address[1])
                    with new.client() as client:
                        if client.info("replication")["role"] == "master":
                            self.master = new
                            return new, time.monotonic() - started
            if time.monotonic() > deadline:
                logs = "\n".join(s.log()[-2000:] for s in self.sentinels)
                raise RuntimeError(f"no failover within {timeout} s: {addresses}\n{logs}")
            time.sleep(0.05)

    def cleanup(self) -> None:
        """Kill every process and remove every folder (sentinels first: they would start a
        failover while the servers go)."""
        for sentinel in self.sentinels:
            sentinel.cleanup()
        for server in self.servers:
            server.stop(kill=True)
            server.cleanup()
        self.sentinels, self.servers, self.master = [], [], None

    def __enter__(self) -> SentinelSet:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cleanup()


# ---- Redis Cluster -------------------------------------------------------------------------

CLUSTER_SLOTS = 16384


def _cluster_command(server: RedisServer, *args: object) -> object:
    """A ``CLUSTER ...`` command on one node, its reply as Redis sent it (no parsing)."""
    with server.client() as client:
        return client.execute_command("CLUSTER", *args)


def _cluster_info(server: RedisServer) -> dict[str, str]:
    text = str(_cluster_command(server, "INFO"))
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


SlotRange = tuple[int, int, tuple[int, str], tuple[tuple[int, str], ...]]


def _slot_map(server: RedisServer) -> tuple[SlotRange, ...]:
    """``CLUSTER SLOTS`` as one node sees it: (first, last, (port, id) of the primary, the
    replicas' (port, id)), sorted. Hosts are left out (a node names itself '' until a MEET)."""
    reply = _cluster_command(server, "SLOTS")
    assert isinstance(reply, list)
    ranges = []
    for first, last, primary, *replicas in reply:
        ranges.append((
            int(first), int(last), (int(primary[1]), str(primary[2])),
            tuple(sorted((int(r[1]), str(r[2])) for r in replicas)),
        ))  # fmt: skip
    return tuple(sorted(ranges))


def _node_flags(server: RedisServer) -> dict[str, tuple[set[str], str]]:
    """``CLUSTER NODES`` as one node sees it: node id -> (flags, its primary's id or '-')."""
    nodes = {}
    for line in str(_cluster_command(server, "NODES")).splitlines():
        node_id, _address, flags, master_id, *_rest = line.split()
        nodes[node_id] = (set(flags.split(",")) - {"myself"}, master_id)
    return nodes


class ClusterSet:
    """A Redis Cluster of ``masters`` primaries with ``replicas_per_master`` replicas each,
    built with plain commands (``CLUSTER ADDSLOTSRANGE``, ``MEET``, ``REPLICATE``: no
    ``redis-cli --cluster``). The 16384 slots are split evenly over the primaries in the
    order they start in. ``node_timeout_ms`` is how long a node must be silent before the others
    think it down; a killed primary's replica takes over a second or two after that.

    Each node's bus port comes from ``free_port()`` too (``--cluster-port``): the default,
    port + 10000, may be taken or above 65535 for the high ports ``free_port()`` returns."""

    def __init__(
        self, *, masters: int = 3, replicas_per_master: int = 1, node_timeout_ms: int = 1000
    ) -> None:
        if masters < 1 or replicas_per_master < 0:
            raise ValueError("a cluster needs a primary, and replicas cannot be negative")
        self.master_count = masters
        self.replicas_per_master = replicas_per_master
        self.node_timeout_ms = node_timeout_ms
        self.servers: list[RedisServer] = []  # the primaries first, then their replicas
        self.bus_ports: dict[int, int] = {}  # port -> cluster bus port
        self.node_ids: dict[int, str] = {}  # port -> node id

    # ---- addresses -----------------------------------------------------------------------

    @property
    def ports(self) -> list[int]:
        """Every node's port, the primaries first as started (dead ones included)."""
        return [s.port for s in self.servers]

    @property
    def url(self) -> str:
        """``redis://`` of the first node still running (the first primary, until killed)."""
        return self._live()[0].url

    @property
    def startup_nodes(self) -> list[ClusterNode]:
        """The nodes still running, as ``RedisCluster(startup_nodes=...)`` takes them."""
        return [ClusterNode("127.0.0.1", s.port) for s in self._live()]

    def client(self, decode_responses: bool = True) -> RedisCluster:
        return RedisCluster(
            startup_nodes=self.startup_nodes, decode_responses=decode_responses, socket_timeout=10
        )

    def server_on(self, port: int) -> RedisServer:
        (server,) = [s for s in self.servers if s.port == port]
        return server

    def masters(self) -> list[tuple[int, str]]:
        """(port, node id) of each primary that serves slots, as the first running node sees
        the slot map, in slot order."""
        primaries = [primary for _first, _last, primary, _replicas in self._live_slot_map()]
        return list(dict.fromkeys(primaries))

    def master_of(self, key: str | bytes) -> RedisServer:
        """The primary serving ``key``'s slot (``CLUSTER KEYSLOT``), as the cluster sees it."""
        slot = _cluster_command(self._live()[0], "KEYSLOT", key)
        assert isinstance(slot, int)
        for first, last, (port, _id), _replicas in self._live_slot_map():
            if first <= slot <= last:
                return self.server_on(port)
        raise RuntimeError(f"no primary serves slot {slot}")

    def run_ids(self) -> dict[int, str]:
        """port -> the run id of the redis-server this object started there (running ones)."""
        return {s.port: s.run_id for s in self._live() if s.run_id is not None}

    def _live(self) -> list[RedisServer]:
        live = [s for s in self.servers if s.process is not None]
        if not live:
            raise RuntimeError("the cluster is not started")
        return live

    def _live_slot_map(self) -> tuple[SlotRange, ...]:
        return _slot_map(self._live()[0])

    # ---- life cycle ----------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> ClusterSet:
        try:
            count = self.master_count * (1 + self.replicas_per_master)
            ports: list[int] = []
            while len(ports) < 2 * count:  # two calls may return the same free port
                port = free_port()
                if port not in ports:
                    ports.append(port)
            for port, bus_port in zip(ports[:count], ports[count:], strict=True):
                server = RedisServer(port=port)
                server.extra = [
                    "--cluster-enabled", "yes",
                    "--cluster-config-file", str(server.dir / "nodes.conf"),
                    "--cluster-port", str(bus_port),
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    # diskless full sync at once (its default waits 5 s for more replicas)
                    "--repl-diskless-sync-delay", "0",
                ]  # fmt: skip
                self.servers.append(server)  # before start(): cleanup() removes its folder
                server.start()
                self.bus_ports[port] = bus_port
                self.node_ids[port] = str(_cluster_command(server, "MYID"))
            self._form(timeout)
        except BaseException:
            self.cleanup()
            raise
        return self

    def _form(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        masters = self.servers[: self.master_count]
        for index, master in enumerate(masters):
            first = index * CLUSTER_SLOTS // len(masters)
            last = (index + 1) * CLUSTER_SLOTS // len(masters) - 1
            _cluster_command(master, "ADDSLOTSRANGE", first, last)
            # distinct epochs, as redis-cli gives them: no collision for the nodes to resolve
            _cluster_command(master, "SET-CONFIG-EPOCH", index + 1)
        seed, *others = self.servers
        for other in others:
            _cluster_command(seed, "MEET", "127.0.0.1", other.port, self.bus_ports[other.port])
        # A node takes CLUSTER REPLICATE only for a primary it has heard of.
        self._wait(deadline, "the nodes did not meet", self._meeting_problems)
        for index, replica in enumerate(self.servers[self.master_count :]):
            master = masters[index % self.master_count]
            _cluster_command(replica, "REPLICATE", self.node_ids[master.port])
        self._wait(deadline, "the replicas did not sync", self._sync_problems)
        # CLUSTER SLOTS leaves out a replica whose replication offset is still 0, which it is
        # until its primary sends something: a FLUSHALL (replicated even on an empty server)
        # does at once what the primary's PING to its replicas would do in 10 s.
        for master in masters:
            with master.client() as client:
                client.flushall()
        self._wait(deadline, "the cluster did not settle", self._settling_problems)

    def _wait(self, deadline: float, failure: str, problems: Callable[[], list[str]]) -> None:
        while True:
            found = problems()
            if not found:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{failure}: {found}\n{self._logs()}")
            time.sleep(0.05)

    def _meeting_problems(self) -> list[str]:
        problems = []
        for server in self.servers:
            known = _node_flags(server)
            if set(known) != set(self.node_ids.values()):
                problems.append(f"{server.port} knows {len(known)} nodes")
            elif any(flags & {"handshake", "noaddr"} for flags, _master in known.values()):
                problems.append(f"{server.port} is still shaking hands")
        return problems

    def _sync_problems(self) -> list[str]:
        problems = []
        for replica in self.servers[self.master_count :]:
            with replica.client() as client:
                replication = client.info("replication")
            if replication.get("master_link_status") != "up":
                problems.append(f"replica {replica.port} not in sync")
        return problems

    def _settling_problems(self) -> list[str]:
        """Until every node is ok, every replica is in sync with its primary, and all nodes
        have the same slot map, each range with its replicas."""
        problems = []
        maps = set()
        for server in self.servers:
            state = _cluster_info(server)["cluster_state"]
            if state != "ok":
                problems.append(f"{server.port}: cluster_state:{state}")
            maps.add(_slot_map(server))
        problems.extend(self._sync_problems())
        if len(maps) != 1:
            problems.append(f"the nodes see {len(maps)} different slot maps")
        elif any(len(r) != self.replicas_per_master for *_range, r in maps.pop()):
            problems.append("a slot range lacks its replicas in CLUSTER SLOTS")
        return problems

    def kill_master_of(self, key: str | bytes, timeout: float = 30.0) -> float:
        """``kill_master()`` of the primary serving ``key``."""
        return self.kill_master(self.master_of(key).port, timeout)

    def kill_master(self, port: int, timeout: float = 30.0) -> float:
        """SIGKILL the primary on ``port``; return, with the seconds it took, once every
        surviving node is ok, sees it failed and agrees on a slot map in which one of its
        replicas, now a primary by its own account, serves each of its slot ranges."""
        victim = self.server_on(port)
        ranges = {(a, b) for a, b, (p, _id), _r in self._live_slot_map() if p == port}
        if victim.process is None or not ranges:
            raise ValueError(f"{port} is not a running primary that serves slots")
        master_id = self.node_ids[port]
        replicas = {p for p, i in self.node_ids.items() if _node_flags(victim)[i][1] == master_id}
        if not replicas:
            raise ValueError(f"the primary on {port} has no replica to take over")
        started = time.monotonic()
        victim.stop(kill=True)
        self._wait(
            started + timeout,
            f"no failover of {port}",
            lambda: self._failover_problems(port, ranges, replicas),
        )
        return time.monotonic() - started

    def _failover_problems(
        self, port: int, ranges: set[tuple[int, int]], replicas: set[int]
    ) -> list[str]:
        problems = []
        maps = set()
        for server in self._live():
            state = _cluster_info(server)["cluster_state"]
            if state != "ok":
                problems.append(f"{server.port}: cluster_state:{state}")
            if "fail" not in _node_flags(server)[self.node_ids[port]][0]:
                problems.append(f"{server.port} does not see {port} failed yet")
            maps.add(_slot_map(server))
        if len(maps) != 1:
            return [*problems, f"the survivors see {len(maps)} different slot maps"]
        (slot_map,) = maps
        promoted = {p for a, b, (p, _id), _r in slot_map if (a, b) in ranges}
        if not promoted <= replicas:
            return [*problems, f"{port}'s slots are served by {promoted}, not by {replicas}"]
        for new in promoted:
            with self.server_on(new).client() as client:
                if client.info("replication")["role"] != "master":
                    problems.append(f"{new} is not a primary yet")
        return problems

    def flush(self) -> None:
        """FLUSHALL on every primary, but only on servers this object started."""
        for port, _node_id in self.masters():
            server = self.server_on(port)
            with server.client() as client:
                if server.process is None or client.info("server")["run_id"] != server.run_id:
                    raise RuntimeError(f"refusing to flush Redis on {port}: we did not start it")
                client.flushall()

    def _logs(self) -> str:
        logs = []
        for server in self.servers:
            path = server.dir / "redis.log"
            text = path.read_text(errors="replace")[-1000:] if path.exists() else ""
            logs.append(f"--- {server.port}\n{text}")
        return "\n".join(logs)

    def cleanup(self) -> None:
        """Kill every node and remove every folder, whatever state a test left them in."""
        for server in self.servers:
            server.stop(kill=True)
            server.cleanup()
        self.servers, self.bus_ports, self.node_ids = [], {}, {}

    def __enter__(self) -> ClusterSet:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cleanup()
