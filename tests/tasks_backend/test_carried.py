"""A Django task's start is carried by its job's begin, and its outcome by the job's ack or
fail (engine/carried.begin_starting and settling_with): a job runs as many script calls
as a delay_for job, for a job of its own message and in a batch, and what the calls write
is what the separate task_started.lua and task_finished.lua wrote. The carried KEYS are the
ones the scripts' headers list."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

compat = pytest.importorskip("delayqueue.django_tasks.compat")

import redis  # noqa: E402
from celery import Celery  # noqa: E402
from django.test import override_settings  # noqa: E402

from delayqueue.engine import carried, direct, task_results, transitions  # noqa: E402
from delayqueue.engine.execution import get_scripts  # noqa: E402
from delayqueue.engine.keys import QueueKeys, TaskResultField, queue_keys  # noqa: E402
from delayqueue.worker.handoff import AUTO_BATCH_FROM  # noqa: E402
from delayqueue.worker.loop import DelayWorker  # noqa: E402
from tests.support import jobs  # noqa: E402
from tests.support import tasks_framework as tasks  # noqa: E402
from tests.support.corrupt import Message, decode_message, take_messages  # noqa: E402
from tests.support.data_redis import delayqueue_redis  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

Status = compat.TaskResultStatus
Q = queue_keys("default")
TASKS = {
    "default": {
        "BACKEND": "delayqueue.tasks_backend.DelayQueueBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"BACKOFF": 0.05, "MAX_ATTEMPTS": 3},
    }
}
LUA = Path(transitions.__file__).parent / "lua"


@pytest.fixture(autouse=True)
def delayqueue_backend() -> Iterator[None]:
    with override_settings(TASKS=TASKS):
        yield


class ScriptCalls:
    """The script calls (EVALSHA) delayqueue sends, counted in what is written to Redis:
    redis-py's connections and the direct connections (one call or several per round
    trip). The tasks' own Redis commands carry none."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        with delayqueue_redis() as client:  # every script loaded: none is sent twice
            for script in vars(get_scripts()).values():
                client.script_load(script.script)
        send = redis.connection.AbstractConnection.send_packed_command
        exchange_all = direct._Link.exchange_all

        def counted_send(connection: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            chunks = [command] if isinstance(command, bytes | str) else list(command)
            self._seen(b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks))
            return send(connection, command, *args, **kwargs)

        def counted_exchange_all(link: Any, packed: bytes, count: int) -> Any:
            self._seen(packed)
            return exchange_all(link, packed, count)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command",
                            counted_send)  # fmt: skip
        monkeypatch.setattr(direct._Link, "exchange_all", counted_exchange_all)

    def _seen(self, packed: bytes) -> None:
        self.count += packed.count(b"\r\nEVALSHA\r\n")


def dispatched(app: Celery, queue: str = "default") -> list[Message]:
    """One pass of an in-process delay worker: the messages it published."""
    take_messages()
    DelayWorker([queue], celery_app=app).run_pass()
    return [decode_message(m) for m in take_messages()]


def run_here(app: Celery, message: Message) -> Any:
    """Run a message in this process as the Celery worker would."""
    task = app.tasks[message.task]
    call = task.apply(args=tuple(message.args), kwargs=message.kwargs, headers=message.headers)
    return call.result


def test_a_django_task_s_job_runs_the_script_calls_of_a_delay_for_job(
    r: redis.Redis, parked_celery: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs.record.delay_for("plain", seconds=0, on_commit=False)
    (plain,) = dispatched(parked_celery, "tests")
    made = tasks.add.enqueue("django", 2, 3)
    (django,) = dispatched(parked_celery)
    failing = tasks.fails_first.enqueue("fails")
    (fails,) = dispatched(parked_celery)
    calls = ScriptCalls(monkeypatch)
    run_here(parked_celery, plain)
    plain_calls, calls.count = calls.count, 0
    assert plain_calls == 2  # begin, then ack
    assert run_here(parked_celery, django) == 5
    assert calls.count == plain_calls  # the begin carries the start, the ack the outcome
    calls.count = 0
    assert isinstance(run_here(parked_celery, fails), ValueError)
    assert calls.count == 2  # begin with the start, fail with the outcome
    result = tasks.add.get_result(made.id)
    assert result.status == Status.SUCCESSFUL and result.return_value == 5
    assert len(result.worker_ids) == 1 and result.attempts == 1
    assert not r.exists(Q.job(made.id))  # acked
    assert r.zscore(Q.scheduled, failing.id) is not None  # its retry
    stored = r.hgetall(Q.task_result(failing.id))
    assert stored[TaskResultField.STATUS] == "FAILED" and stored[TaskResultField.ATTEMPT] == "1"
    assert [e[0] for e in json.loads(stored[TaskResultField.ERRORS])] == ["builtins.ValueError"]


def test_a_batch_s_django_tasks_run_one_script_call_per_begin_and_per_ack(
    r: redis.Redis, parked_celery: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [tasks.add.enqueue(f"b{i}", i, 1) for i in range(AUTO_BATCH_FROM)]
    messages = dispatched(parked_celery)
    assert sum(len(m.args[2]) for m in messages) == len(made)
    calls = ScriptCalls(monkeypatch)
    assert sum(run_here(parked_celery, m) for m in messages) == len(made)  # all succeeded
    assert calls.count == 2 * len(made)
    for i, each in enumerate(made):
        result = tasks.add.get_result(each.id)
        assert result.status == Status.SUCCESSFUL and result.return_value == i + 1
        assert len(result.worker_ids) == 1 and not r.exists(Q.job(each.id))


def test_a_results_key_of_another_type_is_left_alone_and_the_job_still_settles(
    r: redis.Redis, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    """The start the begin carries meets the key's type: the attempt fails, as when
    task_started.lua was a call of its own, and the failure is recorded (a retry), the key
    untouched."""
    made = tasks.add.enqueue("planted", 1, 1)
    (message,) = dispatched(parked_celery)
    r.set(Q.task_result(made.id), "someone else's")
    with caplog.at_level(logging.ERROR):
        run_here(parked_celery, message)
    assert r.get(Q.task_result(made.id)) == "someone else's"
    assert r.zscore(Q.scheduled, made.id) is not None and r.zcard(Q.inflight) == 0
    assert "WRONGTYPE" in caplog.text


HEADER_KEY = re.compile(r"^-- KEYS\[(\d+)\] .*?(dq:\{Q\}:\S*)", re.MULTILINE)
CARRIED_KEY = re.compile(r"^--   KEYS\[(\d+)\] .*?(dq:\{Q\}:\S*)", re.MULTILINE)
JOB = "01JAAAAAAAAAAAAAAAAAAAAAAA"


def header_keys(script: str) -> list[str]:
    """The script's KEYS, then the ones a call may carry after them (its header's
    "Carried" lines), numbered one after another."""
    source = (LUA / f"{script}.lua").read_text()
    found = [(int(i), key) for i, key in HEADER_KEY.findall(source) + CARRIED_KEY.findall(source)]
    assert [i for i, _ in found] == list(range(1, len(found) + 1)), found
    return [re.sub(r"<minute>", "*", key.replace("<id>", JOB)) for _, key in found]


def keys_of(call: transitions.ScriptCall[Any]) -> list[str]:
    return [re.sub(r"stats:\d+$", "stats:*", key) for key in call.keys]


def test_the_keys_a_call_carries_are_the_ones_its_script_s_header_lists() -> None:
    keys = QueueKeys("dq", "Q")
    start = task_results.task_started(
        keys, JOB, now_ms=1, worker="w", ttl_seconds=1, kept=1, task="t", args="[]",
        kwargs="{}", backend="default", priority="0", status="RUNNING", token="1",
    )  # fmt: skip
    outcome = task_results.task_finished(keys, JOB, 1, status="SUCCESSFUL", finished_ms=1)
    begin = carried.begin_starting(transitions.begin(keys, JOB, "1", visibility_ms=1), start)
    ack = carried.settling_with(transitions.ack(keys, JOB, "1"), outcome)
    fail = carried.settling_with(
        transitions.fail(
            keys, JOB, "1", backoff_ms=0, error="e", traceback="t", max_attempts=1, dead_max=1
        ),
        outcome,
    )
    for name, call in (("begin", begin), ("ack", ack), ("fail", fail)):
        assert call is not None and call.script == name
        assert keys_of(call) == header_keys(name)
    assert begin is not None and begin.args[6:] == start.args  # task_started's ARGV, after 6


def test_an_outcome_that_cannot_be_written_is_logged_and_the_job_is_acked_all_the_same(
    r: redis.Redis, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    """The ack carries the outcome: a results key someone replaced while the task ran is
    left alone, the ack is not (the job ran)."""
    made = tasks.add.enqueue("replaced", 1, 1)
    (message,) = dispatched(parked_celery)

    def replace(**kwargs: Any) -> None:
        r.delete(Q.task_result(made.id))
        r.set(Q.task_result(made.id), "someone else's")

    compat.task_started.connect(replace, dispatch_uid="test-replace")
    try:
        with caplog.at_level(logging.ERROR, "delayqueue.runner.job"):
            assert run_here(parked_celery, message) == 2
    finally:
        compat.task_started.disconnect(dispatch_uid="test-replace")
    assert r.get(Q.task_result(made.id)) == "someone else's"
    assert not r.exists(Q.job(made.id)) and r.zcard(Q.inflight) == 0  # acked
    assert "its result (SUCCESSFUL) could not be recorded" in caplog.text
    assert "WRONGTYPE" in caplog.text
