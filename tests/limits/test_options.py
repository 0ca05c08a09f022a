"""Bad limit options are refused where they are given, with an error that names them; good
ones reach the job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis

import delayqueue
from delayqueue import delayed_task
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import InvalidOption
from tests.support import limit_tasks

Q = queue_keys(limit_tasks.QUEUE)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"rate": "0/s"}, "rate"),
        ({"rate": "20/x"}, "rate"),
        ({"rate": "20"}, "rate"),
        ({"rate": 20}, "rate"),
        ({"rate": "-1/s"}, "rate"),
        ({"rate": "20000000000/s"}, "rate"),
        ({"concurrency": -1}, "concurrency"),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 2.5}, "concurrency"),
        ({"concurrency": True}, "concurrency"),
        ({"expires": 0}, "expires"),
        ({"expires": timedelta(0)}, "expires"),
        ({"expires": -5}, "expires"),
    ],
)
def test_bad_task_options_are_refused_at_the_decorator(options: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidOption, match=named):
        delayed_task(queue="limits", **options)(lambda: None)


@pytest.mark.parametrize("limit_key", ["", "x" * 201, 5, b"bytes", "\ud800"])
def test_a_bad_limit_key_is_refused_at_the_call(r: redis.Redis, limit_key: Any) -> None:
    with pytest.raises(InvalidOption, match="limit_key"):
        limit_tasks.keyed.delay_for("x", seconds=0, limit_key=limit_key, on_commit=False)
    assert r.zcard(Q.scheduled) == 0


def test_a_limit_key_on_a_task_without_limits_is_refused(r: redis.Redis) -> None:
    with pytest.raises(InvalidOption, match="no rate or concurrency"):
        limit_tasks.expiring.delay_for("x", seconds=0, limit_key="a", on_commit=False)


def test_limits_and_expiry_reach_the_job_and_the_call_expiry_wins(r: redis.Redis) -> None:
    job = limit_tasks.keyed.delay_for("x", seconds=10, limit_key="p:1", on_commit=False)
    assert r.hget(Q.job(job.id), "lim") == "4\n1000\n1\np:1"
    assert r.hget(Q.job(job.id), "exp") is None
    job = limit_tasks.expiring.delay_for("y", seconds=10, expires=600, on_commit=False)
    due = r.zscore(Q.scheduled, job.id)
    assert due is not None and r.hget(Q.job(job.id), "exp") == str(int(due) + 600_000)
    job = limit_tasks.expiring.delay_for("z", seconds=10, on_commit=False)
    due = r.zscore(Q.scheduled, job.id)
    assert due is not None and r.hget(Q.job(job.id), "exp") == str(int(due) + 30_000)


def test_delay_many_items_take_a_limit_key(r: redis.Redis) -> None:
    specs = [
        delayqueue.spec(limit_tasks.keyed, [f"t{i}"], delay=5, limit_key=f"provider:{i % 2}")
        for i in range(4)
    ]
    jobs = delayqueue.delay_many(specs, on_commit=False)
    keys = [r.hget(Q.job(job.id), "lim") for job in jobs]
    assert keys == [f"4\n1000\n1\nprovider:{i % 2}" for i in range(4)]


def test_a_limited_job_can_be_cancelled_and_replaced_by_its_key(r: redis.Redis) -> None:
    first = limit_tasks.rated.delay_for("a", seconds=10, key="k", on_commit=False)
    replaced = limit_tasks.rated.delay_for(
        "b", seconds=20, key="k", on_conflict="replace", on_commit=False
    )
    assert replaced.id == first.id and replaced.outcome == "replaced"
    assert r.hget(Q.job(first.id), "args") == '["b"]'
    assert limit_tasks.rated.cancel(key="k") and not r.exists(Q.job(first.id))


@pytest.mark.parametrize(
    ("options", "named"),
    [({"RATE": "20/x"}, "rate"), ({"CONCURRENCY": -2}, "concurrency"), ({"EXPIRES": 0}, "expires")],
)
def test_a_system_check_reports_bad_limits_in_settings(options: dict[str, Any], named: str) -> None:
    from django.core.checks import run_checks
    from django.test import override_settings

    tasks = {
        "default": {"BACKEND": "delayqueue.tasks_backend.DelayQueueBackend", "OPTIONS": options}
    }
    with override_settings(TASKS=tasks):
        found = [m for m in run_checks(tags=["delayqueue"]) if m.id == "delayqueue.E030"]
    assert len(found) == 1 and named in found[0].msg and "TASKS['default']" in found[0].msg
    with override_settings(TASKS={"default": {**tasks["default"], "OPTIONS": {"RATE": "5/m"}}}):
        assert not [m for m in run_checks(tags=["delayqueue"]) if m.id == "delayqueue.E030"]


def test_the_async_api_takes_a_limit_key_and_an_expiry(r: redis.Redis) -> None:
    import asyncio

    async def main() -> delayqueue.Job:
        return await limit_tasks.keyed.adelay_for(
            "x", seconds=10, limit_key="p:2", expires=60, on_commit=False
        )

    job = asyncio.run(main())
    assert r.hget(Q.job(job.id), "lim") == "4\n1000\n1\np:2"
    due = r.zscore(Q.scheduled, job.id)
    assert due is not None and r.hget(Q.job(job.id), "exp") == str(int(due) + 60_000)
