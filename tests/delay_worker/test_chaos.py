"""The chaos suite, short form: each scenario of tests/chaos/scenarios.py with ~1,000 jobs
over a few seconds while real processes are killed, the broker or Redis goes away, or the
delay worker's clock is minutes off. Every acknowledged job must run: 0 lost, none left pending.
The long form: ``python -m tests.chaos --soak``."""

from __future__ import annotations

import time

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from delayqueue import RedisUnavailable
from delayqueue.engine.keys import queue_keys
from delayqueue.worker.loop import DelayWorker
from tests.chaos.failover import SHORT as FAILOVER_SHORT
from tests.chaos.failover import FailoverScenario, run_failover
from tests.chaos.scenarios import SCENARIOS, Scenario, run_scenario
from tests.support import jobs


@pytest.mark.timeout(120)
@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_no_job_is_lost(scenario: Scenario) -> None:
    result = run_scenario(scenario, seconds=4.0, spread=2.5, settle=60.0)
    print(result)
    assert result.scheduled >= 400
    assert result.lost == 0, result.lost_tags[:20]
    assert (result.pending, result.dead) == (0, 0)
    assert result.executed == result.scheduled
    if not scenario.ack_emulation:  # the setting took effect: kombu kept no unacked messages
        assert result.broker_unacked_keys == 0
    # Never before the due time (Redis's clock), whatever the worker's clock says ...
    assert result.early == 0
    if scenario.worker_clock:
        assert abs(result.worker_clock_offset_s) > 400  # the worker really lived 7 min off
        # ... and not minutes late either: a worker that trusted its own clock would be 7 min
        # early or late. (A bound on correctness, far above the latency benchmarks' figures.)
        assert result.late_max_ms < 5_000


def _paused(r: redis.Redis, ms: int) -> None:
    r.execute_command("CLIENT", "PAUSE", ms, "ALL")


def test_paused_redis_gives_an_error_not_a_hang_and_retry_is_safe(r: redis.Redis) -> None:
    config = {**settings.DELAYQUEUE, "SOCKET_TIMEOUT": 0.3}
    with override_settings(DELAYQUEUE=config):
        jobs.record.delay_for("warm", seconds=60, on_commit=False)  # queue known, scripts loaded
        _paused(r, 3000)
        started = time.monotonic()
        try:
            with pytest.raises(RedisUnavailable, match="retrying is safe"):
                jobs.record.delay_for("x", seconds=60, key="pay-1", on_commit=False)
            waited = time.monotonic() - started
        finally:
            r.execute_command("CLIENT", "UNPAUSE")
        assert waited < 3.0, f"the call waited {waited:.1f} s: as long as the pause itself"

        # The retry (same dedupe key) leaves exactly one job, whatever the first call did.
        job = jobs.record.delay_for("x", seconds=60, key="pay-1", on_commit=False)
        again = jobs.record.delay_for("x", seconds=60, key="pay-1", on_commit=False)
    keys = queue_keys("tests")
    assert again.id == job.id
    assert r.hgetall(keys.dedupe) == {"pay-1": job.id}
    assert r.zcard(keys.scheduled) == 2  # "warm" and the one keyed job
    print(f"paused Redis: RedisUnavailable after {waited:.2f} s (SOCKET_TIMEOUT 0.3 s)")


def test_worker_pass_on_a_paused_redis_raises_redis_unavailable(r: redis.Redis) -> None:
    config = {**settings.DELAYQUEUE, "SOCKET_TIMEOUT": 0.3}
    with override_settings(DELAYQUEUE=config):
        worker = DelayWorker(["tests"])
        worker.run_pass()  # scripts loaded
        _paused(r, 3000)
        try:
            with pytest.raises(RedisUnavailable):
                worker.run_pass()
        finally:
            r.execute_command("CLIENT", "UNPAUSE")
        worker.run_pass()  # and it carries on once Redis answers again


# ---- failover of delayqueue's Redis master (tests/chaos/failover.py) --------------------------


@pytest.mark.timeout(150)
@pytest.mark.parametrize("scenario", FAILOVER_SHORT, ids=[s.name for s in FAILOVER_SHORT])
def test_a_failover_loses_acknowledged_jobs_only_without_durable(
    scenario: FailoverScenario, capsys: pytest.CaptureFixture[str]
) -> None:
    """The master SIGKILLed mid-run, its replica 0.5 s behind, producers scheduling and the
    workers dispatching and acking: with DURABLE every job a call acknowledged runs; without,
    the jobs acknowledged while the replica was behind are lost (the control: the harness
    sees a loss). The long form measures more kills: python -m tests.long_run --failover."""
    result = run_failover(scenario, settle=60.0)
    with capsys.disabled():
        print(f"\n{result.line()}")
        for kind, message in result.error_samples.items():
            print(f"  {kind}: {message}")
    assert result.workers_down == []
    assert result.foreign_errors == []  # a caller sees delayqueue's errors only
    assert len(result.promoted_s) == 1 and result.writes_back_s[0] < 20
    assert result.unacknowledged_calls > 0  # the kill did land while the producers wrote
    assert result.acknowledged >= 200  # enough to say something (about 400 on a quiet machine)
    assert (result.pending, result.dead) == (0, 0)
    assert result.executed + result.lost == result.acknowledged
    if scenario.durable:
        assert result.lost == 0, result.lost_tags[:20]
    else:
        assert result.lost > 0  # acknowledged while the replica was frozen
