"""The Tasks backend against data in Redis that delayqueue did not write (planted with
write access to Redis): ``get_result`` and ``aget_result`` return a result or raise
``TaskResultDoesNotExist``, nothing else, and never import a module a result names that is
no task of this process; errors read back are cut as an attempt cuts them when it writes.
And ``priority=True`` (a bool passes Django's own check) is stored as the int 1, so its
result can be read, before and after it ran."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

compat = pytest.importorskip("delayqueue.django_tasks.compat")

import redis  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

import delayqueue  # noqa: E402
from delayqueue.django_tasks.job_args import PRIORITY  # noqa: E402
from delayqueue.django_tasks.results import MAX_KEPT, MAX_TRACEBACK_CHARS  # noqa: E402
from delayqueue.engine.keys import TaskResultField, queue_keys  # noqa: E402
from delayqueue.wire import decode_args  # noqa: E402
from tests.support import tasks_framework as tasks  # noqa: E402
from tests.support.processes import run_python  # noqa: E402
from tests.support.stored import stored_job  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

Status = compat.TaskResultStatus
Q = queue_keys("default")
BACKEND = "delayqueue.tasks_backend.DelayQueueBackend"
ADD = "tests.support.tasks_framework.add"


@pytest.fixture(autouse=True)
def delayqueue_backend() -> Iterator[None]:
    setting = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"],
                           "OPTIONS": {"BACKOFF": 0.05, "MAX_ATTEMPTS": 3}}}  # fmt: skip
    with override_settings(TASKS=setting):
        yield


def backend() -> Any:
    return compat.task_backends["default"]


def read(result_id: str) -> Any:
    """get_result and aget_result of ``result_id``: the same, or both the same error."""
    try:
        found = backend().get_result(result_id)
    except compat.TaskResultDoesNotExist:
        with pytest.raises(compat.TaskResultDoesNotExist):
            asyncio.run(backend().aget_result(result_id))
        raise
    also = asyncio.run(backend().aget_result(result_id))
    assert (also.id, also.status) == (found.id, found.status)
    return found


def gone_result(r: redis.Redis, **fields: Any) -> str:
    """The id of a job that ran and is gone, with a results hash of ``fields``."""
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("h", 1, 2)
    delayqueue.cancel("default", result.id)
    base: dict[Any, Any] = {TaskResultField.TASK: ADD, TaskResultField.ARGS: '["h", 1, 2]',
            TaskResultField.STATUS: "SUCCESSFUL", TaskResultField.RETURN: "3"}  # fmt: skip
    base.update(fields)
    r.hset(Q.task_result(result.id), mapping=base)
    return str(result.id)


# ---- priority ----------------------------------------------------------------------------


def test_priority_true_is_stored_as_an_int_and_its_result_reads(r: redis.Redis) -> None:
    result = tasks.add.using(priority=True, run_after=timezone.now() + timedelta(hours=1)).enqueue(
        "p", 1, 2
    )
    job = stored_job(r, Q, result.id)
    _, options = decode_args(job["args"], job["kwargs"])
    assert options[PRIORITY] == 1 and not isinstance(options[PRIORITY], bool)
    found = read(result.id)
    assert found.status == Status.READY and found.task.priority == 1


def test_a_bool_priority_an_earlier_build_wrote_reads_as_its_int(r: redis.Redis) -> None:
    result_id = gone_result(r, **{TaskResultField.PRIORITY: "True"})
    assert read(result_id).task.priority == 1


def test_priority_true_runs_and_its_result_reads_successful(
    celery_worker: Any, delay_worker: Any
) -> None:
    delay_worker("--queues", "default")
    result = tasks.add.using(priority=True).enqueue("prio", 1, 2)

    def done() -> bool:
        try:
            return bool(backend().get_result(result.id).status == Status.SUCCESSFUL)
        except compat.TaskResultDoesNotExist:
            return False

    wait_for(done, timeout=30)
    assert backend().get_result(result.id).return_value == 3


# ---- planted data ------------------------------------------------------------------------


@pytest.mark.parametrize("score", [float("inf"), float("-inf"), 1e20, -1e20, 2**63])
def test_a_dead_score_past_any_date_reads_as_failed_with_no_finish(
    r: redis.Redis, score: float
) -> None:
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("d", 1, 2)
    r.zrem(Q.scheduled, result.id)
    r.zadd(Q.dead, {result.id: score})
    found = read(result.id)
    assert found.status == Status.FAILED and found.finished_at is None


@pytest.mark.parametrize(
    "path",
    [
        "tests.support.raises_at_import.task",
        "tests.support.imported_on_read.task",
        "." * 3000,
        "a." * 1500 + "b",
        "",
        "os",
        "\x00.x",
        "x" * 100_000,
    ],
    ids=lambda path: repr(path[:40]),
)
def test_a_path_that_names_no_task_of_this_process_is_never_imported(
    r: redis.Redis, path: str
) -> None:
    result_id = gone_result(r, **{TaskResultField.TASK: path})
    with pytest.raises(compat.TaskResultDoesNotExist):
        read(result_id)
    assert "tests.support.imported_on_read" not in sys.modules
    assert "tests.support.raises_at_import" not in sys.modules


READ_IN_A_FRESH_PROCESS = """
import sys, django
django.setup()
from delayqueue.django_tasks.compat import task_backends
before = "orders_demo.tasks" in sys.modules
result = task_backends["default"].get_result(sys.argv[1])
print(before, result.status, result.task.name, result.return_value)
"""


def test_a_task_of_an_installed_app_is_read_in_a_process_that_never_imported_it(
    r: redis.Redis,
) -> None:
    """A result names a task of an installed app (orders_demo): a process that has not
    imported the task's module yet (a management command, another web process) reads it."""
    result_id = gone_result(
        r,
        **{TaskResultField.TASK: "orders_demo.tasks.send_payment_reminder",
           TaskResultField.ARGS: "[1]", TaskResultField.RETURN: '"reminded"'},
    )  # fmt: skip
    out = run_python(READ_IN_A_FRESH_PROCESS, result_id, timeout=60)
    assert out.stdout.split() == ["False", "SUCCESSFUL", "send_payment_reminder", "reminded"]


def test_errors_read_back_are_cut_as_an_attempt_cuts_them(r: redis.Redis) -> None:
    long = ["builtins.ValueError", "x" * (MAX_TRACEBACK_CHARS + 5) + "end"]
    errors = [["builtins.KeyError", "t"]] * 100_000 + [long] * MAX_KEPT
    result_id = gone_result(
        r,
        **{
            TaskResultField.STATUS: "FAILED",
            TaskResultField.ERRORS: json.dumps(errors),
            TaskResultField.WORKERS: json.dumps(["w" * 5000] * 1_000),
        },
    )
    found = read(result_id)
    assert len(found.errors) == MAX_KEPT and len(found.worker_ids) == MAX_KEPT
    assert all(len(e.traceback) == MAX_TRACEBACK_CHARS for e in found.errors)
    assert found.errors[0].traceback.endswith("end")


@pytest.mark.parametrize(
    "fields",
    [
        {TaskResultField.RETURN: "[" * 100_000},
        {TaskResultField.ARGS: "[" * 100_000 + "]" * 100_000},
        {TaskResultField.KWARGS: '{"a":' * 3000 + "1" + "}" * 3000},
        {TaskResultField.PRIORITY: "9" * 400},
        {TaskResultField.PRIORITY: "1e400"},
        {TaskResultField.STARTED: "9" * 15, TaskResultField.FINISHED: "-1"},
        {TaskResultField.BACKEND: "\x00"},
    ],
    ids=lambda fields: repr(fields)[:40],
)
def test_other_planted_fields_read_or_do_not_exist(r: redis.Redis, fields: dict[str, str]) -> None:
    result_id = gone_result(r, **fields)
    try:
        read(result_id)
    except compat.TaskResultDoesNotExist:
        pass
