"""A model test of the limit step in the claim script: any interleaving of scheduling (due at
any instant of the next second, with or without a limit key), claiming (ahead, so that
starts are counted at their due times and land anywhere in a window) and finishing keeps
every window of the rate within it, the running jobs within the concurrency, and every job
in exactly one place."""

from __future__ import annotations

from typing import cast

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import limit_name, queue_keys
from tests.support import limit_tasks
from tests.support.fuzzing import examples

Q = queue_keys(limit_tasks.QUEUE)
KEYED = limit_tasks.keyed  # rate 4/s and concurrency 1, per key
RATED = limit_tasks.rated  # rate 5/s
KEYS = ["", "a", "b"]
WHAT = ["rated", "rated", "rated", *KEYS]  # what a schedule step schedules
LIMITS = [(KEYED, key, 4, 1) for key in KEYS] + [(RATED, "", 5, None)]

steps = st.lists(
    st.one_of(
        st.tuples(st.just("schedule"), st.integers(0, 900), st.sampled_from(WHAT)),
        st.tuples(st.just("schedule"), st.integers(0, 900), st.sampled_from(WHAT)),
        st.tuples(st.just("claim"), st.integers(1, 12), st.just("")),
        st.tuples(st.just("finish"), st.integers(0, 50), st.sampled_from(["ack", "fail"])),
    ),
    max_size=60,
)


def most_in_a_window(times: list[float], window: float) -> int:
    ordered, best, low = sorted(times), 0, 0
    for high, t in enumerate(ordered):
        while ordered[low] <= t - window:
            low += 1
        best = max(best, high - low + 1)
    return best


def forget(r: redis.Redis) -> None:
    keys = list(r.scan_iter(match=Q.base + ":*"))
    if keys:
        r.delete(*keys)


@pytest.mark.fuzz
@settings(max_examples=examples(60), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
@example(steps=[("schedule", 100 * i, "rated") for i in range(8)] + [("claim", 12, "")])
@example(steps=[("schedule", 0, "a"), ("schedule", 0, "a"), ("claim", 2, ""), ("claim", 2, "")])
def test_any_interleaving_keeps_the_limits_and_every_job(
    r: redis.Redis, steps: list[tuple[str, int, str]]
) -> None:
    forget(r)
    scheduled: set[str] = set()
    running: dict[str, bytes | int] = {}  # id -> token
    done: set[str] = set()
    for kind, number, detail in steps:
        if kind == "schedule":
            if detail == "rated":
                job = RATED.delay_for("x", seconds=number / 1000, on_commit=False)
            else:
                job = KEYED.delay_for(
                    "x", seconds=number / 1000, limit_key=detail or None, on_commit=False
                )
            scheduled.add(job.id)
        elif kind == "claim":
            claim = run(transitions.claim(Q, limit=number, visibility_ms=60_000, ahead_ms=1000))
            for claimed in claim.jobs:
                running[claimed.id.decode()] = claimed.token
        elif running:
            job_id = sorted(running)[number % len(running)]
            token = str(running.pop(job_id))
            if detail == "ack":
                assert run(transitions.ack(Q, job_id, token))
                done.add(job_id)
            else:
                call = transitions.fail(
                    Q, job_id, token, backoff_ms=number, error="E", traceback="",
                    max_attempts=1000, dead_max=1000,
                )  # fmt: skip
                assert run(call) == "retry"
        for task, key, rate, concurrency in LIMITS:
            base = Q.limit_prefix + limit_name(task.name, key)
            log = cast(list[tuple[str, float]], r.zrange(base + ":r", 0, -1, withscores=True))
            assert most_in_a_window([score for _, score in log], 1000) <= rate
            assert concurrency is None or r.zcard(base + ":c") <= concurrency
        in_scheduled = set(r.zrange(Q.scheduled, 0, -1))
        in_flight = set(r.zrange(Q.inflight, 0, -1))
        assert in_flight == set(running) and not in_scheduled & in_flight
        assert in_scheduled | in_flight | done == scheduled and not done & in_scheduled
