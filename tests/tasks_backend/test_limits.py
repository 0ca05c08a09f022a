"""Limits through Django's Tasks framework: RATE, CONCURRENCY and EXPIRES in a backend's
OPTIONS for every task, or a task's own (where ``@task`` passes them on: Django 6.1, the
backport). Each Django task has a budget of its own (its module path is its limit key)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

compat = pytest.importorskip("delayqueue.django_tasks.compat")

import redis  # noqa: E402
from django.test import override_settings  # noqa: E402

from delayqueue.django_tasks.task import DelayQueueTask  # noqa: E402
from delayqueue.engine import transitions  # noqa: E402
from delayqueue.engine.execution import run  # noqa: E402
from delayqueue.engine.keys import JobField, queue_keys  # noqa: E402
from tests.support import tasks_framework as tasks  # noqa: E402
from tests.support.stored import stored_job  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

Q = queue_keys("default")


def tasks_setting(**options: Any) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": "delayqueue.tasks_backend.DelayQueueBackend",
            "QUEUES": ["default", "orders"],
            "OPTIONS": options,
        }
    }


@pytest.fixture(autouse=True)
def limited_backend() -> Iterator[None]:
    with override_settings(TASKS=tasks_setting(RATE="2/s", EXPIRES=600)):
        yield


def test_options_limit_every_task_each_on_its_own_budget(r: redis.Redis) -> None:
    for i in range(3):
        tasks.add.enqueue(f"a{i}", 1, 2)
        tasks.always_fails.enqueue(f"f{i}")
    claim = run(transitions.claim(Q, limit=100, visibility_ms=30_000))
    assert len(claim.jobs) == 4 and claim.held == 2  # two of each task
    job = stored_job(r, Q, claim.jobs[0].id.decode())
    assert job[JobField.LIMITS].startswith("2\n1000\n0\n") and JobField.EXPIRES in job


def test_a_task_s_own_limits_win_each_over_the_option_of_its_name(r: redis.Redis) -> None:
    try:
        own = compat.task(concurrency=1, expires=timedelta(seconds=5))(tasks.add.func)
    except TypeError:  # Django 6.0: @task passes no options on
        pytest.skip("@task passes no options to the backend's task_class")
    assert isinstance(own, DelayQueueTask)
    result = own.enqueue("own", 1, 2)
    job = stored_job(r, Q, result.id)
    assert job[JobField.LIMITS] == f"2\n1000\n1\n{own.module_path}"  # RATE: OPTIONS'
    due = r.zscore(Q.scheduled, result.id)
    assert due is not None and job[JobField.EXPIRES] == str(int(due) + 5_000)


@pytest.mark.parametrize(
    ("options", "named"),
    [({"RATE": "0/s"}, "RATE"), ({"CONCURRENCY": -1}, "CONCURRENCY"), ({"EXPIRES": 0}, "EXPIRES")],
)
def test_bad_limit_options_are_refused_when_the_backend_is_made(
    options: dict[str, Any], named: str
) -> None:
    with override_settings(TASKS=tasks_setting(**options)):
        with pytest.raises(compat.InvalidTaskBackend, match=named):
            compat.task_backends["default"]  # noqa: B018
