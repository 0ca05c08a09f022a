"""Limits on periodic jobs: a DELAYQUEUE["SCHEDULES"] entry's rate, concurrency and expires
(or its task's) go with every occurrence, which is limited and expires as any job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.conf import settings
from django.test import override_settings

from delayqueue.engine import schedules as stored_schedules
from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import InvalidOption
from delayqueue.periodic import declarations, declare, planner
from delayqueue.services import schedules as schedule_service
from tests.support import limit_tasks
from tests.support.clocks import HOUR, mid_hour

Q = queue_keys(limit_tasks.QUEUE)


@pytest.fixture(autouse=True)
def only_these(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(declarations, "_in_code", {})
    yield


def schedules(**entries: dict[str, Any]) -> Any:
    return override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "SCHEDULES": entries})


def test_an_occurrence_carries_the_entry_s_limits_and_expiry(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # both plans in one hour, however close to its end they run (in the last instants of an
    # hour, the re-plan would be for the next hour: another occurrence, another job)
    clock = mid_hour(r, monkeypatch)
    entry = {"task": "tests.support.jobs.record", "every": 3600, "args": ["t"],
             "queue": limit_tasks.QUEUE, "concurrency": 1, "expires": 30}  # fmt: skip
    with schedules(hourly=entry):
        assert planner.reconcile().planned == ["hourly"]
        [stored] = stored_schedules.stored(Q.queue, "hourly")
        job_id = str(stored.job)
        assert r.hget(Q.job(job_id), "lim") == "0\n1000\n1\n"
        due = r.zscore(Q.scheduled, job_id)
        assert due == (clock // HOUR + 1) * HOUR
        assert r.hget(Q.job(job_id), "exp") == str(int(due) + 30_000)
        # run now twice: one runs, the other waits for the slot
        first, second = schedule_service.run_now("hourly"), schedule_service.run_now("hourly")
        claim = run(transitions.claim(Q, limit=100, visibility_ms=30_000))
        # both are due in the same millisecond: either may win the one slot
        [ran] = [job.id.decode() for job in claim.jobs]
        assert ran in (first, second) and claim.held == 1
        waiting = second if ran == first else first
        assert waiting is not None and r.zscore(Q.scheduled, waiting) is not None
        # a changed limit re-plans: the unclaimed occurrence is replaced
        with schedules(hourly={**entry, "concurrency": 2}):
            assert planner.reconcile().planned == ["hourly"]
        assert r.hget(Q.job(job_id), "lim") == "0\n1000\n2\n"  # the same instant, re-written


def test_a_bad_limit_in_an_entry_is_refused_where_it_is_declared() -> None:
    entry = {"task": "tests.support.jobs.record", "every": 60, "rate": "0/s"}
    with schedules(bad=entry):
        with pytest.raises(InvalidOption, match="rate"):
            declare.from_settings()
