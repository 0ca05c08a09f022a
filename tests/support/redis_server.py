"""A redis-server the test suite (or a benchmark) starts itself, on a free port; and
``cleanup_on_exit``, which stops it even when the suite is stopped with a signal."""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import redis


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGTERM when this process dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), even by SIGKILL; None elsewhere. The kernel sends it when
    the *thread* that started the child ends, so it is used from the main thread only."""
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl: do what it would have done
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


def cleanup_on_exit(*callbacks: Callable[[], object]) -> None:
    """Run ``callbacks`` once when this process exits: normally (atexit, which covers Ctrl-C:
    pytest ends on KeyboardInterrupt) or on SIGTERM/SIGHUP, whose handler cleans up and then
    dies of the same signal as it would have. A forked child never runs them. Signals that
    already have a handler keep it."""
    owner = os.getpid()
    done = False

    def run() -> None:
        nonlocal done
        if done or os.getpid() != owner:
            return
        done = True
        for callback in callbacks:
            try:
                callback()
            except Exception:  # the other callbacks must still run
                traceback.print_exc()

    atexit.register(run)
    if threading.current_thread() is not threading.main_thread():
        return

    def on_signal(signum: int, frame: FrameType | None) -> None:
        run()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) in (signal.SIG_DFL, None):
            signal.signal(sig, on_signal)


WORKER_FOLDERS = "worker-folders"  # in a test run's folder: the folders its workers made


def remove_listed(folder: str) -> None:
    """Remove the folders listed in ``folder``'s ``WORKER_FOLDERS`` file, if any."""
    listed = Path(folder) / WORKER_FOLDERS
    if listed.exists():
        for line in listed.read_text().splitlines():
            shutil.rmtree(line, ignore_errors=True)


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
        self.own_port = port is None  # a port of its choosing: another one if it is taken
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
        # Dies with this process, even one killed by SIGKILL (Linux).
        self.process = subprocess.Popen(args, preexec_fn=_die_with_parent())
        deadline = time.monotonic() + 10
        while True:
            try:
                info = self.client().info("server")
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
                continue
            if int(info["process_id"]) == self.process.pid:
                self.run_id = str(info["run_id"])
                return self
            # Another process's server took the port between free_port() and this start
            # (test runs in parallel): this one cannot listen there.
            self.stop(kill=True)
            if not self.own_port or self.run_id is not None:  # (a restart keeps its port)
                raise RuntimeError(f"port {self.port} is another redis-server's")
            self.port = free_port()
            return self.start()

    def stop(self, *, kill: bool = False) -> None:
        if self.process is None:
            return
        if kill:
            self.process.kill()
        else:
            self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
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


# The minimal command set of docs/redis-acl.md (library, delay worker, Celery side).
ACL_COMMANDS = (
    "+ping +evalsha +script|load +time "
    "+hget +hmget +hset +hsetnx +hdel +hincrby "
    "+zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zscore +zcard +zpopmin "
    "+del +exists +expire +type +get +sadd +smembers +publish +subscribe +hgetall"
)
