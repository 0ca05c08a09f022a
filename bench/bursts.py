"""Bursts: many jobs due at one instant, and many due over a few seconds, each drained by the
same Celery worker under Celery's defaults (ack emulation on) and with ack emulation off,
beside plain Celery: ``countdown``/``eta`` (held in the worker's memory) and ``delay()`` of
a backlog released at the due time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from bench.baselines import eta_at
from bench.env import BROKER_DB, BenchEnv, CeleryConfig, wait_for
from bench.report import Figure
from bench.throughput import Sizes
from delayqueue.producer import api

HOLD = "bench-hold"  # a Celery queue no worker consumes: plain delay()'s backlog waits here


def _stamps(env: BenchEnv, total: int, timeout: float) -> list[tuple[float, float]]:
    """(due ms, started ms) of ``total`` stamp runs, once all have run."""
    from bench.tasks import LATENESS

    redis = env.client()
    wait_for(lambda: redis.llen(LATENESS) >= total, timeout, "every burst job's run", 0.02)
    rows = [row.split() for row in redis.lrange(LATENESS, 0, -1)]
    redis.delete(LATENESS)
    return [(float(due), float(started)) for due, started in rows]


def _schedule_delayqueue(task: Any, dues: list[float]) -> None:
    for start in range(0, len(dues), 1_000):
        specs = [
            api.spec(task, (int(due),), eta=eta_at(due)) for due in dues[start : start + 1_000]
        ]
        api.delay_many(specs, on_commit=False)


def _schedule_countdown(dues: list[float]) -> None:
    from bench.tasks import stamp

    for due in dues:
        stamp.apply_async(args=(int(due),), eta=eta_at(due))


def _run(
    env: BenchEnv, system: str, make_dues: Callable[[float], list[float]]
) -> tuple[list[float], list[tuple[float, float]]]:
    """Schedule jobs with ``system``, due at ``make_dues(epoch ms now)`` (called once the
    workers are ready), and wait for every run: (the dues, the (due, started) rows)."""
    from bench.tasks import stamp, stamp_single

    env.flush()
    env.start_celery()
    children = env.start_delay_workers(1, "bench") if system.startswith("delayqueue") else []
    try:
        dues = make_dues(time.time() * 1000)
        timeout = (max(dues) / 1000 - time.time()) + 300
        if system == "celery delay()":
            return dues, _run_plain(env, dues)
        if system == "celery countdown":
            _schedule_countdown(dues)
        else:
            _schedule_delayqueue(stamp_single if "1 job" in system else stamp, dues)
        return dues, _stamps(env, len(dues), timeout)
    finally:
        env.stop(children)


def _run_plain(env: BenchEnv, dues: list[float]) -> list[tuple[float, float]]:
    """Plain ``delay()``: the messages wait on a list no worker reads, which becomes the
    worker's queue at the due time (RENAME): a backlog appearing at one instant."""
    from bench.tasks import stamp

    due = dues[0]
    for _ in dues:
        stamp.apply_async(args=(int(due),), queue=HOLD)
    broker = env.client(BROKER_DB)
    # Sending can take longer than the lead (apply_async's rate varies with the machine):
    # then the burst's instant moves to just after the last send, and every start is
    # counted from that instant instead (the stamps' own due argument is not used here).
    late_ms = time.time() * 1000 + 500 - due
    ahead = due / 1000 - time.time()
    if late_ms > 0:
        ahead += late_ms / 1000
    time.sleep(max(0.0, ahead))
    if broker.llen("celery"):
        raise RuntimeError("benchmark: the Celery queue was not empty before the burst")
    broker.rename(HOLD, "celery")
    rows = _stamps(env, len(dues), 300)
    shift = max(0.0, late_ms)
    return [(d, started - shift) for d, started in rows]


def _lead_s(system: str, count: int) -> float:
    """Seconds from now to the burst: enough to schedule ``count`` jobs first (and for a
    new delay worker to be waiting)."""
    base = 1.0 if count < 1_000 else 3.0
    if system.startswith("delayqueue"):
        return base + count / 50_000
    return base + count / 1_000  # apply_async: ~1,500-2,000 messages/s here


SYSTEMS = ("delayqueue", "delayqueue, 1 job per message", "celery delay()", "celery countdown")


def burst(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    """``sizes.burst`` jobs due at one instant: drained jobs/s and the first job's lateness,
    per system, under Celery's defaults and with ack emulation off."""
    figures: list[Figure] = []
    count = sizes.burst
    for config in _configs(env):
        env.use_celery(config)
        label = "Celery defaults" if config.ack_emulation else "ack emulation off"
        results: dict[str, tuple[float, float]] = {}
        for system in SYSTEMS:
            lead_ms = _lead_s(system, count) * 1000
            dues, rows = _run(env, system, lambda now: [float(int(now + lead_ms))] * count)  # noqa: B023
            due = dues[0]
            starts = sorted(started for _, started in rows)
            drained = count / max(0.001, (starts[-1] - due) / 1000)
            results[system] = (drained, starts[0] - due)
        plain, _ = results["celery delay()"]
        countdown, countdown_first = results["celery countdown"]
        detail = {"jobs": count, "celery_worker": config.describe(), "all": results}
        for system in SYSTEMS[:2]:
            drained, first = results[system]
            goal = label == "Celery defaults" and system == "delayqueue"
            figures += [
                Figure("burst", f"{system}: {count:,} due at once, drained ({label})",
                       drained, "jobs/s", "plain Celery delay(), same worker", plain,
                       "≥ 1.0x delay()" if goal else "", drained >= plain if goal else None,
                       detail if system == "delayqueue" else {}),
                Figure("burst", f"{system}: {count:,} due at once, drained ({label})",
                       drained, "jobs/s", "Celery countdown, same worker", countdown),
                Figure("burst", f"{system}: first job of the burst, after due ({label})",
                       first, "ms", "Celery countdown", countdown_first,
                       "≤ 10 ms" if system == "delayqueue" else "",
                       first <= 10 if system == "delayqueue" else None),
            ]  # fmt: skip
    return figures


def spread(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    """``sizes.burst`` jobs due at random over 4-15 s: lateness p50 and p99 per system."""
    from bench.timing import percentile

    figures: list[Figure] = []
    count = sizes.burst
    low, high = sizes.spread_s
    for config in _configs(env):
        env.use_celery(config)
        label = "Celery defaults" if config.ack_emulation else "ack emulation off"
        late: dict[str, list[float]] = {}
        for system in ("delayqueue", "delayqueue, 1 job per message", "celery countdown"):
            ahead_ms = (_lead_s(system, count) - 1.0) * 1000  # time to schedule them all

            def spread_dues(now: float) -> list[float]:
                return [now + ahead_ms + random.uniform(low, high) * 1000 for _ in range(count)]  # noqa: B023

            _, rows = _run(env, system, spread_dues)
            late[system] = sorted(started - due for due, started in rows)
        for system in ("delayqueue", "delayqueue, 1 job per message"):
            for name, p in (("p50", 50.0), ("p99", 99.0)):
                value = percentile(late[system], p) / 1000
                goal = name == "p99" and system == "delayqueue" and label == "Celery defaults"
                figures.append(
                    Figure("spread", f"{system}: {count:,} due over {low:g}-{high:g} s, "
                           f"lateness {name} ({label})",
                           value, "s", "Celery countdown, same worker",
                           percentile(late["celery countdown"], p) / 1000,
                           "≤ 2 s" if goal else "", value <= 2 if goal else None,
                           {"jobs": count, "celery_worker": config.describe()}
                           if name == "p50" else {})
                )  # fmt: skip
    return figures


def _configs(env: BenchEnv) -> list[CeleryConfig]:
    """The worker configuration asked for (Celery's defaults unless told), then the same
    with ack emulation flipped."""
    first = env.celery_requested
    return [first, replace(first, ack_emulation=not first.ack_emulation)]
