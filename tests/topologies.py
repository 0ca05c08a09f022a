"""Redis topologies the tests start themselves, on free loopback ports: a Sentinel set of one
master, one replica and three sentinels (``redis-server <conf> --sentinel``), with timeouts low
enough that a failover takes a few seconds.

    with SentinelSet() as topology:            # or start() ... cleanup() in a fixture
        url = topology.url                     # sentinel://127.0.0.1:p1;...;sentinel://...:p3/0
        topology.kill_master()                 # SIGKILL; returns when a replica is promoted

Every process dies with the test process (``PR_SET_PDEATHSIG``), and ``cleanup()`` kills them
and removes their folders, whatever state a failed test left them in. The machine's own Redis
is never touched: every port comes from ``free_port()``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from tests.redis_server import RedisServer, _die_with_parent, free_port

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
