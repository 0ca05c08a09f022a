"""The benchmark's own world: a redis-server, Django set up on it, and child processes
(Celery worker, delay workers) that share it through the environment."""

from __future__ import annotations

import os
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from tests.support.processes import Process, child_env
from tests.support.redis_server import RedisServer

DQ_DB, BROKER_DB, RAW_DB = 0, 1, 3


def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.005
) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"benchmark: {what} did not happen within {timeout:.0f} s")
        time.sleep(interval)


@dataclass(frozen=True)
class CeleryConfig:
    """How the benchmark's Celery worker runs: its command line and the broker transport
    options ``bench.settings`` reads from the environment (the worker, the delay workers'
    publisher and the Celery baselines all use them).

    The default is Celery's own: prefork, 2 processes (this machine's cores), prefetch
    multiplier 4, kombu's Redis ack emulation on. docs/worker.md's tuning for delayqueue's tasks
    turns ack emulation off: delayqueue re-dispatches a job whose message a killed worker
    took with it (its visibility deadline), so the broker's own bookkeeping of unacked
    messages (two blocking round trips per message in the Celery main process: a copy of the
    message into the ``unacked`` hash on delivery, its removal at the ack) buys it nothing.
    The Celery baselines run on the same worker."""

    pool: str = "prefork"
    concurrency: int = 2
    prefetch_multiplier: int = 4
    ack_emulation: bool = True

    def args(self) -> list[str]:
        return ["-P", self.pool, "-c", str(self.concurrency),
                "--prefetch-multiplier", str(self.prefetch_multiplier)]  # fmt: skip

    def environ(self) -> dict[str, str]:
        return {"BENCH_CELERY_ACK_EMULATION": "1" if self.ack_emulation else "0"}

    def describe(self) -> str:
        return (
            f"celery worker {' '.join(self.args())}, broker ack emulation "
            f"{'on' if self.ack_emulation else 'off'}"
        )


class BenchEnv:
    """Starts redis-server before Django is set up, so that ``bench.settings`` (and every
    child) uses it; ``close()`` stops every process it started."""

    def __init__(self, *, aof: bool = False, celery: CeleryConfig | None = None) -> None:
        self.celery_config = celery or CeleryConfig()
        self.celery_requested = self.celery_config  # what the command line asked for
        extra = ["--maxmemory-policy", "noeviction"]
        self.server = RedisServer(appendonly=aof, appendfsync="everysec", extra=extra).start()
        self.dir = Path(tempfile.mkdtemp(prefix="dq-bench-"))
        os.environ["DQ_TEST_REDIS_PORT"] = str(self.server.port)
        os.environ["DQ_TEST_REDIS_RUN_ID"] = str(self.server.run_id)
        os.environ["DQ_TEST_DIR"] = str(self.dir)
        os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
        os.environ.update(self.celery_config.environ())
        self.children: list[Process] = []
        self.celery: Process | None = None

        import django

        django.setup()

    # ---- Redis -----------------------------------------------------------------------

    def client(self, db: int = DQ_DB, decode: bool = True) -> redis.Redis:
        return redis.Redis(port=self.server.port, db=db, decode_responses=decode, socket_timeout=60)

    def flush(self, *dbs: int) -> None:
        for db in dbs or (DQ_DB, BROKER_DB, RAW_DB):
            self.server.flush(db)
        from delayqueue.engine import clients as connection

        connection.reset()

    def used_memory(self) -> int:
        return int(self.client().info("memory")["used_memory"])

    # ---- children --------------------------------------------------------------------

    def use_celery(self, config: CeleryConfig) -> Process:
        """The Celery worker (and the delay workers started from now on) with ``config``:
        the running worker is stopped when it has another."""
        if config != self.celery_config:
            if self.celery is not None:
                self.celery.stop()
                self.celery = None
            self.celery_config = config
            os.environ.update(config.environ())
        return self.start_celery()

    def start_celery(self) -> Process:
        """The Celery worker on the default queue, as ``celery_config`` says; ready once it
        has run a ping task."""
        if self.celery is not None and self.celery.alive():
            return self.celery
        worker = self._start(
            "celery",
            [sys.executable, "-m", "celery", "-A", "orders_demo", "worker", "-l", "warning",
             *self.celery_config.args(), "-Q", "celery",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
        )  # fmt: skip
        self.celery = worker
        from bench import tasks

        token = uuid.uuid4().hex
        tasks.ping.delay(token)
        wait_for(
            lambda: self.client().get(tasks.PING) == token or not worker.alive(),
            60,
            "the Celery worker's start",
        )
        if not worker.alive():
            raise RuntimeError(f"Celery worker died:\n{worker.output()}")
        return worker

    def start_delay_workers(self, count: int, queue: str, **env: str) -> list[Process]:
        """``count`` run_delay_worker processes; ready once each has sent a heartbeat."""
        from delayqueue.engine.keys import global_keys

        workers_key = global_keys().workers
        before = int(self.client().zcard(workers_key))
        args = [sys.executable, "manage.py", "run_delay_worker", "--queues", queue, "-v", "1"]
        started = [self._start(f"delay-worker-{queue}-{i}", args, **env) for i in range(count)]

        def ready() -> bool:
            for worker in started:
                if not worker.alive():
                    raise RuntimeError(f"delay worker died:\n{worker.output()}")
            return int(self.client().zcard(workers_key)) >= before + count

        wait_for(ready, 60, "the delay workers' start", interval=0.05)
        return started

    def _start(self, name: str, args: list[str], **env: str) -> Process:
        log = self.dir / f"{name}-{len(self.children)}.log"
        child = Process(name, args, log, child_env(**env))
        self.children.append(child)
        return child

    def stop(self, children: list[Process]) -> None:
        for child in children:
            child.stop()

    def close(self) -> None:
        for child in self.children:
            child.stop()
        self.server.cleanup()
