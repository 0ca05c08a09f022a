"""Periodic jobs (``--only periodic``): an every-second schedule's tick lateness (the
occurrence's instant -> its task starts) with 1 and 3 delay workers, beside Celery beat's
every-second entry on the same machine in the same run (beat fires from one process's
timer: its lateness is start -> the previous start + 1 s, the instant beat itself aims
at); then 10,000 schedules due in the same minute: all fire, their p99 lateness, and Redis
memory per schedule."""

from __future__ import annotations

import json
import sys
import time

from bench.env import BenchEnv
from bench.report import Figure
from bench.throughput import Sizes
from bench.timing import percentile

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def _instant_ms(job_id: str) -> int:
    """The time part of a ULID (an occurrence's id: its instant); -1 for another entry."""
    if len(job_id) != 26:
        return -1
    value = 0
    for char in job_id[:10]:
        value = value * 32 + CROCKFORD.index(char)
    return value


def _ticks(env: BenchEnv) -> list[tuple[str, float]]:
    from bench.tasks import TICKS

    found = []
    for raw in env.client().lrange(TICKS, 0, -1):
        job_id, started = str(raw).split()
        found.append((job_id, float(started)))
    return found


def _written(env: BenchEnv, setting: dict) -> str:
    """The schedules as a JSON file the delay workers' settings read (10,000 of them are
    past what one environment variable may hold)."""
    path = env.dir / "schedules.json"
    path.write_text(json.dumps(setting))
    return str(path)


def _delayqueue_lateness(env: BenchEnv, workers: int, seconds: float) -> list[float]:
    from bench.tasks import TICKS

    env.flush()
    setting = {"bench-every-second": {"task": "bench.tasks.tick", "every": 1, "args": ["t"]}}
    children = env.start_delay_workers(workers, "bench", BENCH_SCHEDULES=_written(env, setting))
    env.client().delete(TICKS)
    time.sleep(seconds)
    env.stop(children)
    time.sleep(1.0)
    runs = _ticks(env)
    ids = [job_id for job_id, _ in runs]
    assert len(ids) == len(set(ids)), "an occurrence ran twice"
    return sorted(started - _instant_ms(job_id) for job_id, started in runs)


def _beat_lateness(env: BenchEnv, seconds: float) -> list[float]:
    from bench.tasks import TICKS

    env.flush()
    schedule_file = env.dir / "beat-schedule"
    beat = env._start(
        "celery-beat",
        [sys.executable, "-m", "celery", "-A", "orders_demo", "beat", "-l", "warning",
         "-s", str(schedule_file)],
    )  # fmt: skip
    time.sleep(3.0)  # beat's start
    env.client().delete(TICKS)
    time.sleep(seconds)
    beat.stop()
    time.sleep(1.0)
    starts = sorted(started for _, started in _ticks(env))
    return sorted(b - (a + 1000) for a, b in zip(starts, starts[1:], strict=False))


def periodic(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    smoke = sizes.late_seconds < 5
    seconds = 8.0 if smoke else 40.0
    env.start_celery()
    one = _delayqueue_lateness(env, 1, seconds)
    three = _delayqueue_lateness(env, 3, seconds)
    beat = _beat_lateness(env, seconds)
    figures = []
    for label, ours in (("1 delay worker", one), ("3 delay workers", three)):
        detail = {"ticks": len(ours), "beat_ticks": len(beat), "seconds": seconds}
        for name, p in (("p50", 50.0), ("p99", 99.0)):
            figures.append(
                Figure("periodic", f"tick lateness {name}, every-second schedule, {label}",
                       percentile(ours, p), "ms", "Celery beat (1 process)",
                       percentile(beat, p), "", None, detail if name == "p50" else {})
            )  # fmt: skip
        figures.append(
            Figure("periodic", f"ticks started before their instant, {label}",
                   sum(1 for v in ours if v < 0), "ticks", "Celery beat", 0, "0",
                   all(v >= 0 for v in ours))
        )  # fmt: skip
    figures += _many(env, 500 if smoke else 10_000)
    return figures


def _many(env: BenchEnv, count: int) -> list[Figure]:
    """``count`` every-minute schedules (all due at each whole minute of UTC), planned by a
    delay worker at its start; the next whole minute they all fire."""
    from bench.tasks import TICKS
    from delayqueue.engine.keys import queue_keys

    env.flush()
    before = env.used_memory()
    setting = {
        f"many-{i}": {"task": "bench.tasks.tick", "every": 60, "args": [str(i)]}
        for i in range(count)
    }
    planned_at = time.time()
    children = env.start_delay_workers(1, "bench", BENCH_SCHEDULES=_written(env, setting))
    schedules_key = queue_keys("bench").schedules
    deadline = time.time() + 300
    while env.client().zcard(schedules_key) < count and time.time() < deadline:
        time.sleep(0.2)
    plan_seconds = time.time() - planned_at
    per_schedule = (env.used_memory() - before) / count
    # The minute every schedule is at once all are planned (those planned before a minute
    # boundary fired at it and moved on to this one).
    planned = env.client().zrange(schedules_key, 0, -1, withscores=True)
    minute_ms = int(max(float(entry[1]) for entry in planned))
    while time.time() * 1000 < minute_ms + 1000:
        time.sleep(0.2)
    deadline = time.time() + 120
    while time.time() < deadline:
        runs = [r for r in _ticks(env) if _instant_ms(r[0]) == minute_ms]
        if len(runs) >= count:
            break
        time.sleep(0.5)
    env.stop(children)
    runs = [r for r in _ticks(env) if _instant_ms(r[0]) == minute_ms]
    env.client().delete(TICKS)
    lateness = sorted(started - minute_ms for _, started in runs)
    detail = {"schedules": count, "plan_seconds": round(plan_seconds, 1)}
    return [
        Figure("periodic", f"{count:,} schedules due in the same minute: occurrences run",
               len(runs), "runs", "—", count, f"all {count:,}", len(runs) == count, detail),
        Figure("periodic", f"{count:,} schedules due in the same minute: p99 lateness",
               percentile(lateness, 99.0) if lateness else float("nan"), "ms", "—", 0),
        Figure("periodic", "Redis memory per schedule (its record, entry, next occurrence)",
               per_schedule, "bytes", "—", 0),
    ]  # fmt: skip
