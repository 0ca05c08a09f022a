"""delayqueue beside its peers in one run, on the bench's own redis-server (``--only peers``):
the goals of issue 34's peer run, each printed with its ratio.

- bulk enqueue: ``delay_many`` of 1,000 jobs per call beside BullMQ's ``Queue.addBulk`` of
  1,000 (``BULK`` jobs each; goal ≥ 2.2x BullMQ's);
- one at a time: ``delay_for`` beside huey's ``schedule()`` (goal ≥ 1.2x huey's) and beside
  BullMQ's ``Queue.add`` (``ONE`` jobs each);
- burst: ``BURST`` jobs due at one instant, drained jobs/s from the due instant to the last
  start (goal: keep ≥ 2x BullMQ's);
- overload: ``BURST`` jobs due evenly over ``OVERLOAD_S`` s, lateness p99 from the due time to
  the start (goal: keep ≤ 0.5x BullMQ's);
- medium and light load: 1,200 and 500 jobs due over 4 s, lateness p99 beside Celery's own
  ``countdown`` and BullMQ (goal: ≤ Celery's; bench/peer_loads.py).

delayqueue runs as the burst scenario runs it (bench/bursts.py): one ``run_delay_worker``
handing jobs to the bench's Celery worker under Celery's defaults (``-P prefork -c 2``,
prefetch 4, ack emulation on), the batched hand-off on (the default), each job the
``bench.tasks.stamp`` task that appends "due_ms started_ms" to a Redis list. BullMQ runs one
``Worker`` with its defaults (concurrency 1) whose processor appends the same line to the
same list (bench/peers_bullmq.mjs, in its own node process; BullMQ's keys in database
``BULLMQ_DB``). Each system has the Redis to itself while it is measured (the Celery worker
stays connected, idle, while BullMQ runs).

BullMQ (the latest on npm) and ioredis are installed on first use with ``npm install --prefix
~/.cache/delayqueue-bench/bullmq`` (``DQ_BENCH_BULLMQ_DIR`` to put them elsewhere), never into
the repository; without node or npm the scenario is skipped, with a message saying so.

huey runs as itself (huey 3, in the dev extra): a ``RedisHuey`` on its defaults (results
on) on the bench's Redis, its task's ``schedule(args=(i,), delay=...)`` one call at a time:
huey 3 writes a task with an eta to its queue list (``LPUSH`` of the pickled message; its
consumer moves it to the schedule when it reads it), so the call's cost is that one round
trip and huey's Python (its ``Task``, signals, pickling, result handle).

Enqueue rates are wall-clock, each system in turn, ``ROUNDS`` rounds (``delay_for`` and
huey in alternate tenths within a round); the drains ``DRAIN_ROUNDS`` rounds, alternating
systems. A figure is the median of its rounds; every round's value, the client's and the
Redis server's CPU per job (client and server CPU are steadier than wall-clock rates on a
busy machine), the ratio of each round and the load average are in its detail."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from bench.bursts import _schedule_delayqueue, _stamps
from bench.env import RAW_DB, BenchEnv, CeleryConfig, wait_for
from bench.report import Figure
from bench.throughput import Sizes
from bench.timing import percentile

BULLMQ_DB = 2  # beside the bench's 0 (delayqueue), 1 (Celery's broker) and 3 (raw)
QUEUE = "peers"
SCRIPT = Path(__file__).resolve().with_name("peers_bullmq.mjs")
MODULES = Path(
    os.environ.get("DQ_BENCH_BULLMQ_DIR", Path.home() / ".cache" / "delayqueue-bench" / "bullmq")
)
BULK, ONE, BURST, OVERLOAD_S, ROUNDS, DRAIN_ROUNDS = 20_000, 20_000, 20_000, 4.0, 3, 3
SMOKE = (2_000, 300, 300, 1.0, 1, 1)
BULK_GOAL, ONE_GOAL, DRAIN_GOAL, P99_GOAL = 2.2, 1.2, 2.0, 0.5
HUEY_TASK = "shop_project.orders.tasks.close_unpaid_order"  # the peer run's 44-char path


class Cost(NamedTuple):
    """What writing ``jobs`` jobs took: wall seconds, the writing process's CPU seconds and
    the Redis server's."""

    jobs: int
    seconds: float
    cpu_s: float
    redis_cpu_s: float

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    def per_job_us(self) -> dict[str, float]:
        return {"cpu_us": self.cpu_s / self.jobs * 1e6,
                "redis_cpu_us": self.redis_cpu_s / self.jobs * 1e6}  # fmt: skip


def _total(costs: list[Cost]) -> Cost:
    return Cost(sum(c.jobs for c in costs), sum(c.seconds for c in costs),
                sum(c.cpu_s for c in costs), sum(c.redis_cpu_s for c in costs))  # fmt: skip


# ---- BullMQ (node) ------------------------------------------------------------------------


def bullmq_modules() -> Path | None:
    """Where BullMQ and ioredis are installed (npm install on first use); None without node
    or npm."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        return None
    if not all((MODULES / "node_modules" / name).is_dir() for name in ("bullmq", "ioredis")):
        MODULES.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["npm", "install", "--prefix", str(MODULES), "--no-audit", "--no-fund",
             "bullmq", "ioredis"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"benchmark: npm could not install BullMQ:\n{done.stderr}")
    return MODULES


def _bullmq_version() -> str:
    package = json.loads((MODULES / "node_modules" / "bullmq" / "package.json").read_text())
    return str(package["version"])


def _config(env: BenchEnv, **extra: Any) -> str:
    return json.dumps(
        {"modules": str(MODULES), "port": env.server.port, "db": BULLMQ_DB, "queue": QUEUE,
         **extra}
    )  # fmt: skip


def _node(env: BenchEnv, mode: str, **extra: Any) -> dict[str, Any]:
    """The JSON line peers_bullmq.mjs prints for ``mode``."""
    done = subprocess.run(
        ["node", str(SCRIPT), mode, _config(env, **extra)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if done.returncode:
        raise RuntimeError(f"benchmark: BullMQ's {mode} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _bullmq_cost(env: BenchEnv, mode: str, count: int) -> Cost:
    env.server.flush(BULLMQ_DB)
    done = _node(env, mode, count=count, batch=1_000)
    return Cost(count, done["seconds"], done["cpu_s"], done["redis_cpu_s"])


# ---- enqueue ------------------------------------------------------------------------------


def _redis_cpu(env: BenchEnv) -> float:
    info = env.client().info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _cost(env: BenchEnv, count: int, write: Callable[[], None]) -> Cost:
    redis_before, cpu_before = _redis_cpu(env), time.process_time()
    started = time.perf_counter()
    write()
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu_before
    return Cost(count, seconds, cpu, _redis_cpu(env) - redis_before)


def _delay_many_cost(env: BenchEnv, count: int) -> Cost:
    from bench.tasks import noop

    env.flush()
    calls = [(i,) for i in range(1_000)]
    noop.delay_many(calls, seconds=3_600)  # connect, load scripts, remember the queue

    def write() -> None:
        for _ in range(0, count, 1_000):
            noop.delay_many(calls, seconds=3_600)

    return _cost(env, count, write)


def _huey_schedule(env: BenchEnv) -> Callable[[int], None]:
    """huey's own ``schedule()`` of ``task(i)`` due in 1-2 hours, on a ``RedisHuey`` with its
    defaults in the raw database; connected by a first call."""
    from huey import RedisHuey

    huey = RedisHuey("bench", port=env.server.port, db=RAW_DB)

    @huey.task(name=HUEY_TASK)
    def close_unpaid_order(n: int) -> None:  # pragma: no cover - only scheduled
        pass

    close_unpaid_order.schedule(args=(0,), delay=3_600)

    def schedule(i: int) -> None:
        close_unpaid_order.schedule(args=(i,), delay=3_600 + i % 3_600)

    return schedule


def _one_at_a_time(env: BenchEnv, count: int) -> tuple[Cost, Cost]:
    """``delay_for`` and huey's ``schedule()``, ``count`` of each, in alternate tenths."""
    from bench.tasks import noop

    env.flush()
    noop.delay_for(0, seconds=3_600)  # connect, load scripts, remember the queue
    huey = _huey_schedule(env)
    ours: list[Cost] = []
    theirs: list[Cost] = []
    step = max(1, count // 10)
    for first in range(0, count, step):
        block = range(first, min(count, first + step))

        def delay_for(block: range = block) -> None:
            for i in block:
                noop.delay_for(i, seconds=3_600 + i % 3_600)

        def schedule(block: range = block) -> None:
            for i in block:
                huey(i)

        ours.append(_cost(env, len(block), delay_for))
        theirs.append(_cost(env, len(block), schedule))
    env.flush()
    return _total(ours), _total(theirs)


def _enqueue(env: BenchEnv, bulk: int, one: int, rounds: int) -> dict[str, list[Cost]]:
    costs: dict[str, list[Cost]] = {}
    for _ in range(rounds):
        for name, cost in (
            ("addBulk", lambda: _bullmq_cost(env, "bulk", bulk)),
            ("delay_many", lambda: _delay_many_cost(env, bulk)),
            ("add", lambda: _bullmq_cost(env, "add", one)),
        ):
            costs.setdefault(name, []).append(cost())
        delay_for, huey = _one_at_a_time(env, one)
        costs.setdefault("delay_for", []).append(delay_for)
        costs.setdefault("huey", []).append(huey)
    env.server.flush(BULLMQ_DB)
    return costs


# ---- burst and overload -------------------------------------------------------------------


def _lead_ms(count: int, factor: float) -> float:
    """Time to write ``count`` jobs before the first is due (~5,000 jobs/s on a busy machine
    for both systems' bulk writes)."""
    return 1_000 + factor * count * 0.2


def _drain_bullmq(env: BenchEnv, count: int, span_ms: float, lead_ms: float) -> list[Any] | None:
    """(due, started) rows of ``count`` jobs drained by a BullMQ Worker, or None when they
    could not all be written before the first was due."""
    from bench.tasks import LATENESS

    env.server.flush(BULLMQ_DB)
    env.client().delete(LATENESS)
    args = ["node", str(SCRIPT), "work", _config(env, stamp_db=0, list=LATENESS)]
    worker = env._start("bullmq-worker", args)
    wait_for(lambda: '"ready"' in worker.output() or not worker.alive(), 60, "BullMQ's start")
    if not worker.alive():
        raise RuntimeError(f"BullMQ's worker died:\n{worker.output()}")
    try:
        done = _node(env, "schedule", count=count, lead_ms=lead_ms, span_ms=span_ms, batch=1_000)
        rows = _stamps(env, count, (lead_ms + span_ms) / 1000 + 600)
    finally:
        worker.stop()
    return rows if done["written_ms"] <= done["first_due_ms"] else None


def _drain_delayqueue(
    env: BenchEnv, count: int, span_ms: float, lead_ms: float
) -> list[Any] | None:
    """``_drain_bullmq``'s rows for delayqueue: one delay worker, the bench's Celery worker."""
    from bench.tasks import stamp

    env.flush()
    env.start_celery()
    children = env.start_delay_workers(1, "bench")
    try:
        first = int(time.time() * 1000 + lead_ms)
        dues = [float(int(first + i * span_ms / count)) for i in range(count)]
        _schedule_delayqueue(stamp, dues)
        written_late = time.time() * 1000 > first
        rows = _stamps(env, count, (lead_ms + span_ms) / 1000 + 600)
    finally:
        env.stop(children)
    return None if written_late else rows


DRAINS = {"delayqueue": _drain_delayqueue, "BullMQ": _drain_bullmq}


def _late(env: BenchEnv, system: str, count: int, span_ms: float) -> list[float]:
    """Each job's lateness (ms, sorted); the run is made again with twice the lead when the
    jobs could not be written before the first was due."""
    factor = 1.0
    while (rows := DRAINS[system](env, count, span_ms, _lead_ms(count, factor))) is None:
        if factor >= 16:
            raise RuntimeError(f"benchmark: {system}'s jobs could not be written before due")
        factor *= 2
    return sorted(started - due for due, started in rows)


def _drains(
    env: BenchEnv, burst: int, overload_s: float, rounds: int
) -> dict[tuple[str, str], list[list[float]]]:
    late: dict[tuple[str, str], list[list[float]]] = {}
    for _ in range(rounds):
        for kind, span_ms in (("burst", 0.0), ("overload", overload_s * 1000)):
            for system in DRAINS:
                late.setdefault((kind, system), []).append(_late(env, system, burst, span_ms))
    return late


def _drained(late: list[float]) -> float:
    """Jobs/s from the due instant to the last start."""
    return len(late) / max(0.001, late[-1] / 1000)


# ---- the scenario -------------------------------------------------------------------------


def peers(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    if bullmq_modules() is None:
        print("peers: skipped, node and npm are needed to run BullMQ", file=sys.stderr)
        return []
    smoke = sizes.burst < 1_000
    bulk, one, burst, overload_s, rounds, drain_rounds = (
        SMOKE if smoke else (BULK, ONE, BURST, OVERLOAD_S, ROUNDS, DRAIN_ROUNDS)
    )
    load = [os.getloadavg()]
    env.use_celery(CeleryConfig())  # the peer run's: Celery's defaults
    costs = _enqueue(env, bulk, one, rounds)
    late = _drains(env, burst, overload_s, drain_rounds)
    from bench.peer_loads import load_rows

    loads = load_rows(env, smoke)
    env.use_celery(env.celery_requested)
    load.append(os.getloadavg())
    common = {"bullmq": _bullmq_version(), "load_average_start_end": load,
              "celery_worker": CeleryConfig().describe()}  # fmt: skip

    def rate(name: str) -> float:
        return statistics.median(c.rate for c in costs[name])

    def enqueue_detail(ours: str, theirs: str) -> dict[str, Any]:
        ratios = [a.rate / b.rate for a, b in zip(costs[ours], costs[theirs], strict=True)]
        return {**common, "ratios": ratios,
                **{name: {"jobs": costs[name][0].jobs, "rounds": [c.rate for c in costs[name]],
                          **_total(costs[name]).per_job_us()}
                   for name in (ours, theirs)}}  # fmt: skip

    def ratios(values: dict[str, list[float]]) -> list[float]:
        return [a / b for a, b in zip(values["delayqueue"], values["BullMQ"], strict=True)]

    drained = {s: [_drained(v) for v in late["burst", s]] for s in DRAINS}
    p99 = {s: [percentile(v, 99.0) / 1000 for v in late["overload", s]] for s in DRAINS}
    drain_detail = {**common, "jobs": burst, "rounds": drained, "ratios": ratios(drained),
                    "first_ms": {s: [v[0] for v in late["burst", s]] for s in DRAINS}}  # fmt: skip
    p99_detail = {**common, "jobs": burst, "seconds": overload_s, "rounds": p99,
                  "ratios": ratios(p99),
                  "p50_s": {s: [percentile(v, 50.0) / 1000 for v in late["overload", s]]
                            for s in DRAINS}}  # fmt: skip
    many, add_bulk = rate("delay_many"), rate("addBulk")
    delay_for, huey = rate("delay_for"), rate("huey")
    ours, theirs = statistics.median(drained["delayqueue"]), statistics.median(drained["BullMQ"])
    our_p99, their_p99 = statistics.median(p99["delayqueue"]), statistics.median(p99["BullMQ"])
    return [
        Figure("peers", "bulk enqueue: delay_many, 1,000 per call", many, "jobs/s",
               "BullMQ addBulk, 1,000 per call", add_bulk, f"≥ {BULK_GOAL}x BullMQ's",
               many >= BULK_GOAL * add_bulk, enqueue_detail("delay_many", "addBulk")),
        Figure("peers", "one at a time: delay_for", delay_for, "jobs/s",
               "huey schedule() (huey 3, its defaults)", huey, f"≥ {ONE_GOAL}x huey's",
               delay_for >= ONE_GOAL * huey, enqueue_detail("delay_for", "huey")),
        Figure("peers", "one at a time: delay_for", delay_for, "jobs/s",
               "BullMQ add, one at a time", rate("add"), detail=enqueue_detail("delay_for", "add")),
        Figure("peers", f"burst: {burst:,} due at one instant, drained", ours, "jobs/s",
               "BullMQ Worker (its defaults)", theirs, f"≥ {DRAIN_GOAL}x BullMQ's",
               ours >= DRAIN_GOAL * theirs, drain_detail),
        Figure("peers", f"overload: {burst:,} due over {overload_s:g} s, lateness p99",
               our_p99, "s", "BullMQ Worker (its defaults)", their_p99,
               f"≤ {P99_GOAL}x BullMQ's", our_p99 <= P99_GOAL * their_p99, p99_detail),
        *loads,
    ]  # fmt: skip
