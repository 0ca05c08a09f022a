"""Chaos harness: schedule thousands of jobs while real processes are broken, then account
for every job (executed, executed more than once, lost).

Each scenario starts its own processes:

- a delayqueue Redis (with AOF where the scenario needs it),
- a Celery broker Redis (separate, so the broker can be stopped alone),
- a ledger Redis on which the task records each run (never touched by a fault),
- a real Celery worker (prefork, 2 processes; ``python -m tests.chaos celery-worker``, with
  kombu's Redis ack emulation on, Celery's default, or off where the scenario says) and a
  real delay worker (``manage.py run_delay_worker``, started through
  ``python -m tests.chaos delay-worker`` so that it knows ``tests.support.chaos_tasks``).

The harness process schedules the jobs itself (``delay_many`` with a dedupe key per job,
retried with the same keys when Redis does not answer) while a fault thread breaks things.
A job counts as *acknowledged* once the call that scheduled it returned. Accounting, after
the faults stop and a settling deadline: *lost* = acknowledged, never run, and neither
pending (scheduled / in flight) nor dead.

Short form: ``tests/delay_worker/test_chaos.py``.
Soak: ``python -m tests.chaos --soak [--minutes N]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import redis

from delayqueue.engine.keys import queue_keys
from tests.support.processes import ROOT, child_env, default_signals
from tests.support.redis_server import RedisServer

QUEUE = "chaos"
OVERRIDE_ENV = "DQ_CHAOS_DELAYQUEUE"  # JSON laid over DELAYQUEUE in the children


# ---- child processes -----------------------------------------------------------------------


class Child:
    """A child process in a session of its own (so a SIGKILL reaches its pool children too),
    with its output appended to a log file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name, self.args, self.env, self.log = name, args, env, log
        self.popen: subprocess.Popen[bytes] | None = None
        self.offset = 0

    def start(self) -> Child:
        with self.log.open("ab") as out:
            self.offset = out.tell()
            self.popen = subprocess.Popen(
                self.args,
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=default_signals,
            )
        return self

    def output(self) -> str:
        """Output since the last start."""
        with self.log.open("rb") as f:
            f.seek(self.offset)
            return f.read().decode(errors="replace")

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def wait_ready(self, marker: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while marker not in self.output():
            if not self.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start:\n{self.output()[-3000:]}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the whole process group, no goodbye."""
        if self.popen is not None:
            with suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def stop(self, timeout: float = 15) -> None:
        if self.popen is None or self.popen.poll() is not None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        with suppress(ProcessLookupError):  # orphaned pool children, if any
            os.killpg(self.popen.pid, signal.SIGKILL)


# ---- the rig: servers and processes of one scenario ------------------------------------------


class Rig:
    def __init__(
        self,
        *,
        appendfsync: str | None = None,
        worker_clock: str | None = None,
        ack_emulation: bool = True,
    ) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="dq-chaos-"))
        self.ack_emulation = ack_emulation
        self.dq = RedisServer(appendonly=appendfsync is not None, appendfsync=appendfsync or "no")
        self.broker = RedisServer()
        self.ledger_server = RedisServer()
        self.worker_clock = worker_clock
        self.celery: Child | None = None
        self.delay: Child | None = None

    def __enter__(self) -> Rig:
        try:
            return self._start()
        except BaseException:
            self.__exit__()
            raise

    def _start(self) -> Rig:
        for server in (self.dq, self.broker, self.ledger_server):
            server.start()
        env = child_env(
            DJANGO_SETTINGS_MODULE="tests.settings",
            DQ_TEST_REDIS_PORT=str(self.dq.port),
            DQ_TEST_REDIS_RUN_ID=str(self.dq.run_id),
            DQ_TEST_DIR=str(self.dir),
            DQ_TEST_BROKER_URL=self.broker.url,
            DQ_CHAOS_LEDGER_URL=self.ledger_server.url,
            DQ_CHAOS_ACK_EMULATION="1" if self.ack_emulation else "0",
        )
        self.env = env
        self.celery = celery_worker_child(env, self.dir)
        delay_args = DELAY_WORKER_ARGS
        if self.worker_clock:
            # libfaketime: the worker process (and only it) sees its clock moved by minutes.
            delay_args = ["faketime", "-f", self.worker_clock, *delay_args]
        self.delay = Child("delay worker", delay_args, env, self.dir / "delay.log")
        self.celery.start()
        self.delay.start()
        self.celery.wait_ready("ready.")
        self.delay.wait_ready("starting")
        return self

    def __exit__(self, *exc: object) -> None:
        for child in (self.delay, self.celery):
            if child is not None:
                child.stop()
        for server in (self.dq, self.broker, self.ledger_server):
            server.cleanup()

    def ledger(self) -> redis.Redis:
        return self.ledger_server.client()

    def logs(self) -> str:
        parts = []
        for name in ("delay.log", "celery.log"):
            path = self.dir / name
            if path.exists():
                parts.append(f"--- {name} (tail)\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)


# ---- faults --------------------------------------------------------------------------------

Fault = Callable[[Rig, threading.Event], str]


# A chaos delay worker's command line (this module's delay-worker entry point).
DELAY_WORKER_ARGS = [
    sys.executable,
    "-m",
    "tests.chaos",
    "delay-worker",
    "--queues",
    QUEUE,
    "-v",
    "1",
]


def celery_worker_child(env: dict[str, str], folder: Path) -> Child:
    """The chaos Celery worker (prefork, 2 processes, Celery's prefetch), not yet started."""
    return Child(
        "celery worker",
        [sys.executable, "-m", "tests.chaos", "celery-worker", "-I", "tests.support.chaos_tasks",
         "-l", "info", "-c", "2", "--without-gossip", "--without-mingle",
         "--without-heartbeat", "--prefetch-multiplier", "4"],
        env,
        folder / "celery.log",
    )  # fmt: skip


def kill_delay_worker(rig: Rig, stop: threading.Event) -> str:
    """SIGKILL the delay worker every 0.5-2 s and start a new one at once."""
    kills = 0
    assert rig.delay is not None
    while not stop.wait(random.uniform(0.5, 2.0)):
        rig.delay.kill()
        kills += 1
        rig.delay.start()
    return f"{kills} SIGKILLs of the delay worker"


def kill_celery_worker(rig: Rig, stop: threading.Event) -> str:
    """SIGKILL the Celery worker (its pool too) 0.5-1.5 s after it became ready, while tasks
    run, then start a new one."""
    kills = 0
    assert rig.celery is not None
    while not stop.wait(random.uniform(0.5, 1.5)):
        rig.celery.kill()
        kills += 1
        rig.celery.start()
        rig.celery.wait_ready("ready.")
    return f"{kills} SIGKILLs of the Celery worker"


def restart_crashed_celery(rig: Rig) -> bool:
    """What a process supervisor (systemd ``Restart=on-failure``) does: a Celery worker that
    died on its own is started again. Celery 5.7's worker can die while it reconnects after
    a broker outage (an AttributeError in kombu's ``restore_unacked``: "Unrecoverable
    error"); the jobs wait in delayqueue meanwhile."""
    assert rig.celery is not None
    if rig.celery.alive() and "Unrecoverable error" not in rig.celery.output():
        return False
    rig.celery.stop()
    rig.celery.start()
    rig.celery.wait_ready("ready.")
    return True


def broker_outage(rig: Rig, stop: threading.Event) -> str:
    """Kill the broker (its queued messages are gone with it), keep it down 3 s, restart."""
    outages = crashes = 0
    while not stop.wait(1.0):
        rig.broker.stop(kill=True)
        outages += 1
        time.sleep(3.0)
        rig.broker.start()
        if stop.wait(2.0):
            break
        crashes += restart_crashed_celery(rig)
    time.sleep(2.0)  # the last reconnect
    crashes += restart_crashed_celery(rig)
    return f"{outages} broker outages of 3 s" + (
        f"; Celery worker crashed on reconnect {crashes}x, restarted" if crashes else ""
    )


def redis_restart(rig: Rig, stop: threading.Event) -> str:
    """SIGKILL the delayqueue Redis every 2-3 s and start it again from its AOF."""
    restarts = 0
    while not stop.wait(random.uniform(2.0, 3.0)):
        rig.dq.stop(kill=True)
        rig.dq.start()
        restarts += 1
    return f"{restarts} SIGKILL restarts of the delayqueue Redis ({rig.dq.appendfsync})"


def no_fault(rig: Rig, stop: threading.Event) -> str:
    stop.wait()
    return f"delay worker clock {rig.worker_clock or 'true'}"


def worker_clock_offset(rig: Rig) -> float:
    """Seconds the delay worker's clock is off, read from the time stamp of its log line
    "starting" (logging reads the process clock; this proves libfaketime took effect)."""
    assert rig.delay is not None
    for line in rig.delay.output().splitlines():
        if "starting" in line:
            stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
            return (stamp - datetime.now()).total_seconds()  # noqa: DTZ005 (both local)
    raise RuntimeError(f"no start line in the delay worker's log:\n{rig.delay.output()}")


# ---- scenarios -----------------------------------------------------------------------------


@dataclass
class Scenario:
    name: str
    fault: Fault
    appendfsync: str | None = None
    worker_clock: str | None = None
    work_ms: int = 0  # task work, so kills land mid-task
    rate: float = 250.0  # jobs scheduled per second
    ack_emulation: bool = True  # kombu's Redis ack emulation in the Celery worker
    batched: bool = False  # the task takes batches: several jobs per Celery message


SCENARIOS = [
    Scenario("delay worker SIGKILL", kill_delay_worker),
    Scenario("Celery worker SIGKILL", kill_celery_worker, work_ms=40, rate=120),
    # The recommended (docs/worker.md) Celery configuration for delayqueue's tasks: a message the
    # killed worker had taken off the broker is gone, and only delayqueue brings the job back.
    Scenario(
        "Celery worker SIGKILL, ack emulation off",
        kill_celery_worker,
        work_ms=40,
        rate=120,
        ack_emulation=False,
    ),
    # The batched hand-off (delayqueue/runner/batches.py): a kill lands mid-batch.
    Scenario(
        "batched, Celery worker SIGKILL", kill_celery_worker, work_ms=40, rate=120, batched=True
    ),  # fmt: skip
    Scenario("batched, delay worker SIGKILL", kill_delay_worker, batched=True),
    Scenario("broker down", broker_outage),
    Scenario("Redis restart, AOF always", redis_restart, appendfsync="always"),
    Scenario("Redis restart, AOF everysec", redis_restart, appendfsync="everysec"),
    Scenario("worker clock -7 min", no_fault, worker_clock="-7m"),
    Scenario("worker clock +7 min", no_fault, worker_clock="+7m"),
]


@dataclass
class Accounting:
    scenario: str
    scheduled: int = 0  # acknowledged to the caller
    executed: int = 0
    duplicated: int = 0  # jobs run more than once
    extra_runs: int = 0  # runs beyond the first
    pending: int = 0
    dead: int = 0
    lost: int = 0
    early: int = 0  # runs before the due time (Redis clock)
    late_p50_ms: float = 0.0
    late_p99_ms: float = 0.0
    late_max_ms: float = 0.0
    enqueue_retries: int = 0
    worker_clock_offset_s: float = 0.0  # measured at its start (about 0 without faketime)
    broker_unacked_keys: int = 0  # kombu's ack emulation keys on the broker (none when off)
    faults: str = ""
    seconds: float = 0.0
    lost_tags: list[str] = field(default_factory=list)


@contextmanager
def delayqueue_on(url: str) -> Iterator[None]:
    """Point this process's delayqueue client at ``url``."""
    from django.conf import settings
    from django.test import override_settings

    from delayqueue.engine import clients as connection

    config = {**getattr(settings, "DELAYQUEUE", {}), "REDIS_URL": url, "SOCKET_TIMEOUT": 2.0}
    with override_settings(DELAYQUEUE=config):
        connection.reset()
        try:
            yield
        finally:
            connection.reset()


def schedule_jobs(
    scenario: Scenario, seconds: float, spread: float, prefix: str
) -> tuple[dict[str, tuple[str, int]], int]:
    """Schedule ``rate * seconds`` jobs in small batches over ``seconds``, each due 0-``spread``
    seconds later; a batch Redis did not acknowledge is sent again with the same dedupe keys.
    Returns tag -> (job id, due ms) of every acknowledged job, and the number of retries."""
    from delayqueue import DelayQueueError, delay_many, spec
    from tests.support.chaos_tasks import chaos_batched_job, chaos_job

    task = chaos_batched_job if scenario.batched else chaos_job

    acknowledged: dict[str, tuple[str, int]] = {}
    retries = 0
    batch = 25
    total = int(scenario.rate * seconds)
    started = time.monotonic()
    for first in range(0, total, batch):
        time.sleep(max(0.0, started + first / scenario.rate - time.monotonic()))
        tags = [f"{prefix}-{n:06d}" for n in range(first, min(total, first + batch))]
        delays = {tag: random.uniform(0, spread) for tag in tags}
        while True:
            specs = [
                spec(task, (tag, scenario.work_ms), delay=delays[tag], key=tag) for tag in tags
            ]
            try:
                jobs = delay_many(specs, on_commit=False)
            except (DelayQueueError, redis.RedisError):
                retries += 1
                time.sleep(0.1)
                continue
            break
        for tag, job in zip(tags, jobs, strict=True):
            assert job.due_at is not None
            acknowledged[tag] = (job.id, int(job.due_at.timestamp() * 1000))
    return acknowledged, retries


def account(
    rig: Rig, name: str, acknowledged: dict[str, tuple[str, int]], settle: float
) -> Accounting:
    """Wait until every acknowledged job ran (or ``settle`` seconds passed), then count."""
    from tests.support.chaos_tasks import FIRST, RUNS

    ledger = rig.ledger()
    deadline = time.monotonic() + settle
    while time.monotonic() < deadline:
        if ledger.hlen(RUNS) >= len(acknowledged):
            break
        time.sleep(0.1)
    # Let re-dispatches of reaped jobs (the source of duplicates) show up before counting.
    dq = rig.dq.client()
    quiet_until = min(deadline, time.monotonic() + 10)
    while time.monotonic() < quiet_until and (
        dq.zcard(queue_keys(QUEUE).inflight) or dq.zcard(queue_keys(QUEUE).scheduled)
    ):
        time.sleep(0.1)

    runs = {tag: int(n) for tag, n in ledger.hgetall(RUNS).items()}
    first = {tag: int(ms) for tag, ms in ledger.hgetall(FIRST).items()}
    result = Accounting(name, scheduled=len(acknowledged))
    lateness: list[int] = []
    for tag, (job_id, due) in acknowledged.items():
        count = runs.get(tag, 0)
        if not count and not any(
            dq.zscore(queue_keys(QUEUE).of_state(zset), job_id) is not None
            for zset in ("scheduled", "inflight", "dead")
        ):
            # Gone from delayqueue since the snapshot of the ledger: it ran meanwhile (a run
            # is recorded before its ack removes the job), or it is lost. Read again to tell.
            count = int(ledger.hget(RUNS, tag) or 0)
            if count:
                first[tag] = int(ledger.hget(FIRST, tag) or 0)
        if count:
            result.executed += 1
            if count > 1:
                result.duplicated += 1
                result.extra_runs += count - 1
            late = first[tag] - due
            lateness.append(late)
            if late < -1:  # ms rounding between Redis TIME and time.time()
                result.early += 1
            continue
        if dq.zscore(queue_keys(QUEUE).dead, job_id) is not None:
            result.dead += 1
        elif any(
            dq.zscore(queue_keys(QUEUE).of_state(zset), job_id) is not None
            for zset in ("scheduled", "inflight")
        ):
            result.pending += 1
        else:
            result.lost += 1
            result.lost_tags.append(tag)
    if lateness:
        lateness.sort()
        result.late_p50_ms = lateness[len(lateness) // 2]
        result.late_p99_ms = lateness[min(len(lateness) - 1, int(len(lateness) * 0.99))]
        result.late_max_ms = lateness[-1]
    return result


def run_scenario(
    scenario: Scenario, *, seconds: float = 6.0, spread: float = 3.0, settle: float = 60.0
) -> Accounting:
    """Run one scenario: schedule jobs for ``seconds`` while the fault runs, then account."""
    started = time.monotonic()
    with Rig(
        appendfsync=scenario.appendfsync,
        worker_clock=scenario.worker_clock,
        ack_emulation=scenario.ack_emulation,
    ) as rig:
        offset = worker_clock_offset(rig)
        stop = threading.Event()
        outcome: list[str] = []
        fault = threading.Thread(
            target=lambda: outcome.append(scenario.fault(rig, stop)), name="fault", daemon=True
        )
        with delayqueue_on(rig.dq.url):
            fault.start()
            try:
                acknowledged, retries = schedule_jobs(scenario, seconds, spread, "job")
                time.sleep(spread)  # keep breaking things until the last jobs are due
            finally:
                stop.set()
                fault.join(60)
        if not rig.celery or not rig.celery.alive():
            raise RuntimeError(f"Celery worker is down after the faults\n{rig.logs()}")
        if not rig.delay or not rig.delay.alive():
            raise RuntimeError(f"delay worker is down after the faults\n{rig.logs()}")
        result = account(rig, scenario.name, acknowledged, settle)
        with suppress(redis.RedisError):
            result.broker_unacked_keys = int(rig.broker.client().exists("unacked", "unacked_index"))
        result.enqueue_retries = retries
        result.worker_clock_offset_s = offset
        result.faults = outcome[0] if outcome else "fault thread did not finish"
        result.seconds = time.monotonic() - started
        if result.lost or result.pending:
            print(rig.logs(), file=sys.stderr)
    return result


def print_table(results: list[Accounting]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="delayqueue chaos accounting")
    columns = ["scenario", "faults", "scheduled", "executed", "dup jobs", "extra runs", "pending"]
    columns += ["dead", "lost", "early", "late p50/p99/max ms", "retries", "clock", "s"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("scenario", "faults") else "right")
    for r in results:
        table.add_row(
            r.scenario,
            r.faults,
            str(r.scheduled),
            str(r.executed),
            str(r.duplicated),
            str(r.extra_runs),
            str(r.pending),
            str(r.dead),
            f"[bold {'red' if r.lost else 'green'}]{r.lost}[/]",
            str(r.early),
            f"{r.late_p50_ms:.0f}/{r.late_p99_ms:.0f}/{r.late_max_ms:.0f}",
            str(r.enqueue_retries),
            f"{r.worker_clock_offset_s:+.0f} s",
            f"{r.seconds:.0f}",
        )
    Console(width=200).print(table)


# ---- command line --------------------------------------------------------------------------


def _setup_django() -> None:
    """Django set up; ``DQ_CHAOS_DELAYQUEUE`` (JSON), when set, is laid over DELAYQUEUE
    first: how tests/chaos/failover.py points the workers at a Sentinel set or a cluster,
    DURABLE on or off. Before ``django.setup()``, so nothing has read the settings yet."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django
    from django.conf import settings

    override = os.environ.get(OVERRIDE_ENV)
    if override:
        settings.DELAYQUEUE = {**settings.DELAYQUEUE, **json.loads(override)}
    django.setup()


def delay_worker_main(argv: list[str]) -> None:
    """``manage.py run_delay_worker`` with ``tests.support.chaos_tasks`` imported first."""
    _setup_django()
    from django.core.management import call_command

    import tests.support.chaos_tasks  # noqa: F401  (registers chaos_job)

    call_command("run_delay_worker", *argv)


def celery_worker_main(argv: list[str]) -> None:
    """``celery -A orders_demo worker ...`` with kombu's Redis ack emulation as
    DQ_CHAOS_ACK_EMULATION says ("0": off; on otherwise, Celery's default). With CELERY_APP
    in DQ_CHAOS_DELAYQUEUE, that app instead, for the Celery worker and the delay worker
    alike (an app set up without autodiscovery: tests/setups/chaos_app.py)."""
    _setup_django()
    from django.conf import settings

    from delayqueue.celery_app import get_celery_app

    if settings.DELAYQUEUE.get("CELERY_APP"):
        app = get_celery_app()
    else:
        from orders_demo.celery import app

    if os.environ.get("DQ_CHAOS_ACK_EMULATION", "1") == "0":
        options = dict(app.conf.broker_transport_options or {})
        app.conf.broker_transport_options = {**options, "ack_emulation": False}
    app.worker_main(["worker", *argv])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["delay-worker"]:
        delay_worker_main(argv[1:])
        return 0
    if argv[:1] == ["celery-worker"]:
        celery_worker_main(argv[1:])
        return 0
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--soak", action="store_true", help="the long form (minutes)")
    parser.add_argument("--minutes", type=float, default=10.0, help="soak length (all scenarios)")
    parser.add_argument("--only", help="run only scenarios whose name contains this")
    options = parser.parse_args(argv)
    _setup_django()
    import tests.support.chaos_tasks  # noqa: F401

    chosen = [s for s in SCENARIOS if not options.only or options.only.lower() in s.name.lower()]
    seconds = options.minutes * 60 / len(chosen) if options.soak else 6.0
    results = []
    for scenario in chosen:
        print(f"running {scenario.name!r} for {seconds:.0f} s ...", flush=True)
        results.append(run_scenario(scenario, seconds=seconds, spread=5.0 if options.soak else 3.0))
        print_table(results)
    return 1 if any(r.lost for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
