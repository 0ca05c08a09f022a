"""A redis-server the test suite (or a benchmark) starts itself, on a free port."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server process. ``restart()`` keeps port and data directory (for AOF tests)."""

    def __init__(
        self,
        *,
        port: int | None = None,
        appendonly: bool = False,
        appendfsync: str = "everysec",
        extra: list[str] | None = None,
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="dq-redis-"))
        self.appendonly = appendonly
        self.appendfsync = appendfsync
        self.extra = extra or []
        self.process: subprocess.Popen[bytes] | None = None
        self.run_id: str | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis(port=self.port, db=db, decode_responses=True, socket_timeout=10)

    def start(self) -> RedisServer:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
            "--dir", str(self.dir), "--save", "", "--daemonize", "no",
            "--appendonly", "yes" if self.appendonly else "no",
            "--appendfsync", self.appendfsync, "--loglevel", "warning",
            "--logfile", str(self.dir / "redis.log"), *self.extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(args)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.run_id = str(self.client().info("server")["run_id"])
                return self
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (
                        (self.dir / "redis.log").read_text()
                        if (self.dir / "redis.log").exists()
                        else ""
                    )
                    raise RuntimeError(
                        f"redis-server did not start on {self.port}: {log}"
                    ) from None
                time.sleep(0.02)

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        self.process.wait(10)
        self.process = None

    def restart(self, *, kill: bool = False) -> None:
        self.stop(kill=kill)
        self.start()

    def flush(self, db: int = 0) -> None:
        """FLUSHDB, but only on the server this object started."""
        client = self.client(db)
        if self.process is None or client.info("server")["run_id"] != self.run_id:
            raise RuntimeError(f"refusing to flush Redis on port {self.port}: we did not start it")
        client.flushdb()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
