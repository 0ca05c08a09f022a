"""Limits (docs/limits.md): what a rate and a concurrency that are never reached cost the
claim and a burst's drain, beside the same jobs with no limit in the same run (interleaved,
each side's best: five rounds of the claim, three of the drain), and how closely
``rate="100/s"`` holds under a burst of 10,000 due jobs (300 with --smoke): the most starts in
any second, the time the burst takes, and how many times the claims held a job back (with the
longest script call the slow log saw: a claim's work stays bounded)."""

from __future__ import annotations

import random
import time
from typing import Any

from bench.bursts import _schedule_delayqueue, _stamps
from bench.env import BenchEnv
from bench.report import Figure
from bench.throughput import ClaimOnly, Sizes
from delayqueue.engine.keys import current_minute, queue_keys
from delayqueue.producer import api

QUEUE = "bench"


def _fill_due(task: Any, count: int) -> None:
    for start in range(0, count, 1_000):
        specs = [api.spec(task, (i,), delay=0) for i in range(start, min(count, start + 1_000))]
        api.delay_many(specs, on_commit=False)


def _claim_rate(env: BenchEnv, task: Any, count: int, batch: int) -> float:
    env.flush()
    _fill_due(task, count)
    time.sleep(0.01)
    worker = ClaimOnly([QUEUE], claim_size=batch)
    started = time.perf_counter()
    while worker.claimed < count:
        before = worker.claimed
        worker.run_pass()
        if worker.claimed == before:
            raise RuntimeError(f"claim stopped at {worker.claimed} of {count} due jobs")
    return count / (time.perf_counter() - started)


def _drain(env: BenchEnv, task: Any, count: int) -> tuple[float, list[float]]:
    """``count`` jobs of ``task`` due at one instant through a delay worker and the Celery
    worker: jobs/s from the due time to the last start, and every start (s after due)."""
    env.flush()
    env.start_celery()
    children = env.start_delay_workers(1, QUEUE)
    try:
        due = time.time() * 1000 + (1_000 if count < 1_000 else 3_000) + count / 50
        _schedule_delayqueue(task, [due] * count)
        timeout = count / 50 + 300
        rows = _stamps(env, count, timeout)
    finally:
        env.stop(children)
    starts = sorted((started - due) / 1000 for _, started in rows)
    return count / max(0.001, starts[-1]), starts


def _most_in_a_window(times: list[float], window: float) -> int:
    best, low = 0, 0
    for high, t in enumerate(times):
        while times[low] <= t - window:
            low += 1
        best = max(best, high - low + 1)
    return best


def limits(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    from bench.tasks import noop, noop_limited, stamp, stamp_100, stamp_limited

    count = max(2_000, sizes.claim // 5)
    rounds: dict[str, list[float]] = {"off": [], "on": []}
    # Interleaved, each side's best of five: one claim pass over 20,000 jobs varies by
    # +-20 % from round to round even on a quiet machine (Redis's own CPU per job too).
    for _ in range(5):
        for side, task in random.sample([("off", noop), ("on", noop_limited)], 2):
            rounds[side].append(_claim_rate(env, task, count, sizes.claim_batch))
    claim_off, claim_on = max(rounds["off"]), max(rounds["on"])

    burst = sizes.burst
    drains: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(3):  # interleaved, each side's best, as the claim's
        for side, task in random.sample([("off", stamp), ("on", stamp_limited)], 2):
            drains[side].append(_drain(env, task, burst)[0])
    drain_off, drain_on = max(drains["off"]), max(drains["on"])

    held = 300 if sizes.burst < 1_000 else 10_000
    redis = env.client()
    redis.config_set("slowlog-log-slower-than", 10_000)  # µs: calls of 10 ms and more
    redis.slowlog_reset()
    first_minute = current_minute()
    _, starts = _drain(env, stamp_100, held)
    (moves, dispatched), slowest = _held_back(env, first_minute), _slowest_call_ms(env)
    most = _most_in_a_window(starts, 1.0)
    took = starts[-1] - starts[0]
    ideal = (held - 100) / 100  # the first 100 at once, then 100 a second
    env.flush()
    detail = {"claim_rounds": rounds, "jobs": held}
    # (put back at their start: dispatched more than once, see docs/limits.md)
    guard = {"held_back": moves, "put_back": dispatched - held, "slowest_script_call_ms": slowest}
    return [
        Figure("limits", f"claim, limits never reached ({count:,} due)", claim_on, "jobs/s",
               "same jobs, no limit, same run", claim_off, "≥ 0.9x no limit",
               claim_on >= 0.9 * claim_off, detail),
        Figure("limits", f"{burst:,} due at once, drained, limits never reached", drain_on,
               "jobs/s", "same burst, no limit, same run", drain_off, "≥ 0.9x no limit",
               drain_on >= 0.9 * drain_off, {"drain_rounds": drains}),
        Figure("limits", f'rate="100/s", {held:,} due at once: most starts in any 1 s',
               most, "starts", "the rate", 100.0, "≤ 100 (+ hand-off jitter)", most <= 105),
        Figure("limits", f'rate="100/s", {held:,} due at once: first to last start', took, "s",
               "at exactly 100/s", ideal, "≤ 1.1x exact", took <= 1.1 * ideal),
        # A claim holds a job back once, or twice when a later start took its room: never
        # once per window (the backlog moved again by every claim; scripts of seconds).
        Figure("limits", f'rate="100/s", {held:,} due at once: times a job was held back',
               moves / held, "per job", "once", 1.0, "≤ 3", moves <= 3 * held, guard),
    ]  # fmt: skip


def _held_back(env: BenchEnv, first_minute: int) -> tuple[int, int]:
    """Jobs the claims held back for a limit (each time) and jobs dispatched, from the
    queue's stats hashes."""
    keys = queue_keys(QUEUE)
    redis = env.client()
    minutes = range(first_minute, current_minute() + 1)
    counts = [redis.hmget(keys.stats(minute), "limited", "dispatched") for minute in minutes]
    return sum(int(c[0] or 0) for c in counts), sum(int(c[1] or 0) for c in counts)


def _slowest_call_ms(env: BenchEnv) -> float:
    """The longest script call in Redis's slow log (of 10 ms and more; 0 for none), in ms."""
    entries = env.client(decode=False).slowlog_get(1_000)
    scripts = [e for e in entries if bytes(e["command"]).upper().startswith(b"EVAL")]
    return max((entry["duration"] / 1000 for entry in scripts), default=0.0)
