"""What a Django task's job costs the Celery side, and that it still records everything: its
start goes in its begin's round trip and its outcome in its ack's (delayqueue/runner/
riders.py, delayqueue/django_tasks/starts.py), for a job of its own message and in a batch;
where no call rode with the begin, the attempt records both in round trips of its own.
The jobs are dispatched by an in-process delay worker onto a parked broker and run here as
the Celery worker runs them; the last test runs them on real prefork and threads workers."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

compat = pytest.importorskip("delayqueue.django_tasks.compat")

import redis  # noqa: E402
from celery import Celery  # noqa: E402
from django.conf import settings  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

from delayqueue.django_tasks import results  # noqa: E402
from delayqueue.django_tasks.job_args import RUN_DJANGO_TASK  # noqa: E402
from delayqueue.engine import direct  # noqa: E402
from delayqueue.engine.execution import get_scripts, run_direct  # noqa: E402
from delayqueue.engine.keys import TaskResultField, queue_keys  # noqa: E402
from delayqueue.engine.transitions import ScriptCall  # noqa: E402
from delayqueue.wire import RUN_BATCH  # noqa: E402
from delayqueue.worker.handoff import AUTO_BATCH_FROM  # noqa: E402
from delayqueue.worker.loop import DelayWorker  # noqa: E402
from tests.support import jobs  # noqa: E402
from tests.support import tasks_framework as tasks  # noqa: E402
from tests.support.corrupt import Message, decode_message, take_messages  # noqa: E402
from tests.support.data_redis import delayqueue_redis  # noqa: E402
from tests.support.processes import Process, child_env, start_celery_worker  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

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


@pytest.fixture(autouse=True)
def delayqueue_backend() -> Iterator[None]:
    with override_settings(TASKS=TASKS):
        yield


class RoundTrips:
    """Round trips that carry delayqueue's scripts (EVALSHA), counted as they are sent:
    redis-py's (a pipeline is one; also counted apart, ``pooled``) and the direct
    connections' (one call, or several: engine/direct_pipeline.py). The tasks' own Redis
    commands carry none."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = self.pooled = 0
        with delayqueue_redis() as client:  # every script loaded: none is sent twice
            for script in vars(get_scripts()).values():
                client.script_load(script.script)
        send = redis.connection.AbstractConnection.send_packed_command
        exchange_all = direct._Link.exchange_all  # (one call's exchange too)

        def counted_send(connection: Any, command: Any, *args: Any, **kwargs: Any) -> Any:
            chunks = [command] if isinstance(command, bytes | str) else list(command)
            packed = b"".join(c if isinstance(c, bytes) else c.encode() for c in chunks)
            self.pooled += b"EVALSHA" in packed
            self._seen(packed)
            return send(connection, command, *args, **kwargs)

        def counted_exchange_all(link: Any, packed: bytes, count: int) -> Any:
            self._seen(packed)
            return exchange_all(link, packed, count)

        monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command",
                            counted_send)  # fmt: skip
        monkeypatch.setattr(direct._Link, "exchange_all", counted_exchange_all)

    def _seen(self, packed: bytes) -> None:
        if b"EVALSHA" in packed:
            self.count += 1


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


def ms(moment: Any) -> float:
    return float(moment.timestamp() * 1000)


def test_a_django_task_s_job_costs_the_round_trips_of_a_delay_for_job(
    r: redis.Redis, parked_celery: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs.record.delay_for("plain", seconds=0, on_commit=False)
    (plain,) = dispatched(parked_celery, "tests")
    made = tasks.add.enqueue("django", 2, 3)
    (django,) = dispatched(parked_celery)
    assert django.task == RUN_DJANGO_TASK
    trips = RoundTrips(monkeypatch)
    run_here(parked_celery, plain)
    plain_trips, trips.count = trips.count, 0
    assert run_here(parked_celery, django) == 5
    assert plain_trips == 2  # begin, then ack
    assert trips.count == plain_trips  # begin with the start, then the outcome with the ack
    assert trips.pooled == 0  # both on direct connections, not through redis-py's pipeline
    result = tasks.add.get_result(made.id)
    assert result.status == Status.SUCCESSFUL and result.return_value == 5
    assert len(result.worker_ids) == 1 and result.attempts == 1
    assert ms(result.started_at) == ms(result.last_attempted_at) <= ms(result.finished_at)
    assert not r.exists(Q.job(made.id)) and r.zcard(Q.inflight) == 0  # acked


def test_while_it_runs_its_result_reads_running_with_its_worker(
    r: redis.Redis, parked_celery: Celery
) -> None:
    made = tasks.reads_itself.enqueue("alone")
    (message,) = dispatched(parked_celery)
    assert run_here(parked_celery, message) == "alone"
    (seen,) = tasks.reports()
    assert seen["status"] == "RUNNING" and len(seen["workers"]) == 1
    # the start written with the begin comes first; the attempt writes its own at its end
    assert seen["started_ms"] <= seen["context_started_ms"]
    result = tasks.reads_itself.get_result(made.id)
    assert result.status == Status.SUCCESSFUL and result.worker_ids == seen["workers"]
    assert ms(result.started_at) == pytest.approx(seen["context_started_ms"])


def test_a_batch_begins_and_settles_its_django_tasks_in_one_round_trip_each(
    r: redis.Redis, parked_celery: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [tasks.reads_itself.enqueue(f"b{i}") for i in range(AUTO_BATCH_FROM)]
    messages = dispatched(parked_celery)  # (split over AUTO_BATCH_SPLIT messages)
    assert {m.task for m in messages} == {RUN_BATCH} and len(messages) > 1
    assert sum(len(m.args[2]) for m in messages) == len(made)
    trips = RoundTrips(monkeypatch)
    assert sum(run_here(parked_celery, m) for m in messages) == len(made)  # all succeeded
    assert trips.count == 2 * len(messages)
    seen = tasks.reports()
    assert sorted(run["id"] for run in seen) == sorted(m.id for m in made)
    assert {run["status"] for run in seen} == {"RUNNING"}
    for each in made:
        result = tasks.reads_itself.get_result(each.id)
        assert result.status == Status.SUCCESSFUL and len(result.worker_ids) == 1
        assert ms(result.started_at) <= ms(result.finished_at)
    # each job's task_started, then its task_finished (sent once the batch's outcomes are
    # written, with its acks)
    signals = tasks.reports(tasks.SIGNALS)
    assert len(signals) == 2 * len(made)
    for each in made:
        mine = [(s["signal"], s["status"]) for s in signals if s["id"] == each.id]
        assert mine == [("task_started", "RUNNING"), ("task_finished", "SUCCESSFUL")]


def test_a_dispatch_its_begin_does_not_let_run_writes_no_start(
    r: redis.Redis, parked_celery: Celery
) -> None:
    made = tasks.add.enqueue("stale", 1, 1)
    (message,) = dispatched(parked_celery)
    r.hset(Q.job(made.id), "tok", "a later dispatch")
    assert run_here(parked_celery, message) is None  # not run
    assert tasks.reports() == [] and not r.exists(Q.task_result(made.id))


def test_without_rides_the_attempt_records_its_start_and_outcome_itself(
    r: redis.Redis, parked_celery: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As under a runner that sends no call with the begin: a round trip each."""
    monkeypatch.setattr(parked_celery.tasks[RUN_DJANGO_TASK], "dq_rides", None)
    made = tasks.fails_first.enqueue("own trips")
    (message,) = dispatched(parked_celery)
    trips = RoundTrips(monkeypatch)
    run_here(parked_celery, message)  # its first attempt fails
    assert trips.count == 4  # begin, start, outcome, fail
    r.zadd(Q.scheduled, {made.id: 0})  # due again now (its backoff skipped)
    (again,) = dispatched(parked_celery)
    assert run_here(parked_celery, again) == 2
    result = tasks.fails_first.get_result(made.id)
    assert result.status == Status.SUCCESSFUL and len(result.worker_ids) == 2
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    signals = [(s["signal"], s["status"]) for s in tasks.reports(tasks.SIGNALS)]
    assert signals == [("task_started", "RUNNING")] * 2 + [("task_finished", "SUCCESSFUL")]


def test_a_task_finished_receiver_that_raises_is_logged_and_the_job_stays_settled(
    r: redis.Redis, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    def raises(**kwargs: Any) -> None:
        raise RuntimeError("a receiver's bug")

    made = tasks.add.enqueue("receiver", 1, 2)
    (message,) = dispatched(parked_celery)
    compat.task_finished.connect(raises, dispatch_uid="test-raises")
    try:
        with caplog.at_level(logging.ERROR, "delayqueue.django_tasks"):
            assert run_here(parked_celery, message) == 3
    finally:
        compat.task_finished.disconnect(dispatch_uid="test-raises")
    assert "task_finished receiver raised" in caplog.text
    assert tasks.add.get_result(made.id).status == Status.SUCCESSFUL
    assert not r.exists(Q.job(made.id))  # acked once, not failed


@pytest.fixture
def only_the_framework_listens() -> Iterator[str]:
    """Django's own receivers of task_started and task_finished alone (the suite's, which
    report each signal, disconnected); the name of the framework's logger."""
    uids = ("tests.support.tasks_framework.started", "tests.support.tasks_framework.finished")
    compat.task_started.disconnect(dispatch_uid=uids[0])
    compat.task_finished.disconnect(dispatch_uid=uids[1])
    try:
        yield compat._LOGGER.name
    finally:
        compat.task_started.connect(tasks._started, dispatch_uid=uids[0])
        compat.task_finished.connect(tasks._finished, dispatch_uid=uids[1])


def test_signals_only_django_s_dropped_log_lines_hear_are_not_sent_nor_their_results_made(
    r: redis.Redis,
    parked_celery: Celery,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    only_the_framework_listens: str,
) -> None:
    framework = only_the_framework_listens
    quiet, logged = tasks.add.enqueue("quiet", 1, 2), tasks.add.enqueue("logged", 2, 3)
    messages = {m.dispatch[1]: m for m in dispatched(parked_celery)}
    made: list[str] = []
    make = results.make_result

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(args[1])
        return make(*args, **kwargs)

    monkeypatch.setattr(results, "make_result", counted)
    with caplog.at_level(logging.WARNING, framework):  # its lines (INFO) dropped
        assert run_here(parked_celery, messages[quiet.id]) == 3
    assert made == []  # nothing would have read a TaskResult
    with caplog.at_level(logging.INFO, framework):
        assert run_here(parked_celery, messages[logged.id]) == 5
    assert made == [logged.id]  # one, for both signals
    lines = [rec.getMessage() for rec in caplog.records if rec.name == framework]
    assert [line.split(" state=")[1] for line in lines] == ["RUNNING", "SUCCESSFUL"]
    assert all(f"id={logged.id} " in line for line in lines)
    monkeypatch.undo()
    for each in (quiet, logged):
        result = tasks.add.get_result(each.id)
        assert result.status == Status.SUCCESSFUL and len(result.worker_ids) == 1
        assert ms(result.started_at) == ms(result.last_attempted_at) <= ms(result.finished_at)


def test_a_job_whose_first_attempt_the_previous_build_recorded_is_finished_by_this_one(
    r: redis.Redis, parked_celery: Celery
) -> None:
    """The previous build wrote the workers and errors again with every outcome; this one
    leaves the workers as its start wrote them and writes the errors only on a failure.
    task_started.lua and task_finished.lua take the same arguments (docs/tasks-backend.md,
    "Rolling deploys")."""
    made = tasks.fails_first.enqueue("deploy")
    (first,) = dispatched(parked_celery)
    assert isinstance(run_here(parked_celery, first), ValueError)  # attempt 1 fails ...
    stored = r.hgetall(Q.task_result(made.id))
    # ... and its outcome is as the previous build wrote it (task_finished.lua's ARGV)
    previous: list[Any] = [86400]
    for field, value in (
        (TaskResultField.STATUS, "FAILED"),
        (TaskResultField.FINISHED, stored[TaskResultField.FINISHED]),
        (TaskResultField.WORKERS, json.dumps(["previous@host"])),
        (TaskResultField.ERRORS, json.dumps([["builtins.ValueError", "its traceback"]])),
        (TaskResultField.STARTED, stored[TaskResultField.STARTED]),
        (TaskResultField.LAST_ATTEMPT, stored[TaskResultField.LAST_ATTEMPT]),
    ):
        previous += [field, value]
    run_direct(ScriptCall("task_finished", [Q.task_result(made.id)], previous, bool,
                          resend_safe=True))  # fmt: skip
    r.zadd(Q.scheduled, {made.id: 0})  # due again now (its backoff skipped)
    (again,) = dispatched(parked_celery)
    assert run_here(parked_celery, again) == 2
    result = tasks.fails_first.get_result(made.id)
    assert result.status == Status.SUCCESSFUL and result.return_value == 2
    assert result.worker_ids[0] == "previous@host" and len(result.worker_ids) == 2
    assert [(e.exception_class_path, e.traceback) for e in result.errors] == [
        ("builtins.ValueError", "its traceback")
    ]
    assert ms(result.started_at) == int(stored[TaskResultField.STARTED])
    assert ms(result.started_at) < ms(result.last_attempted_at) <= ms(result.finished_at)


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_results_read_back_after_runs_on_prefork_and_threads(
    r: redis.Redis, tmp_path: Path, pool: str
) -> None:
    """A batch and a job of its own message, on a real Celery worker of each pool (on a
    broker database of the test's own) and a real delay worker."""
    url = str(settings.CELERY_BROKER_URL).rsplit("/", 1)[0] + "/6"
    with redis.Redis.from_url(url) as own_broker:
        own_broker.flushdb()
    broker = {"DQ_TEST_BROKER_URL": url}
    concurrency = "4" if pool == "threads" else "2"
    started: list[Process] = []
    try:
        celery = start_celery_worker(
            tmp_path / "celery.log",
            "-P",
            pool,
            "-c",
            concurrency,
            "-n",
            f"{pool}@%h",
            env=child_env(**broker),
        )
        started.append(celery)
        at = timezone.now() + timedelta(seconds=1)
        batch: list[Any] = [
            tasks.add.using(run_after=at).enqueue(f"{pool}{i}", i, 1) for i in range(70)
        ]
        later = tasks.reads_itself.using(run_after=at + timedelta(seconds=1)).enqueue(pool)
        delay = Process(
            "delay worker", [sys.executable, "manage.py", "run_delay_worker", "-v", "2",
                             "--queues", "default"],
            tmp_path / "delay.log", child_env(**broker),
        )  # fmt: skip
        started.append(delay)

        def all_finished() -> bool:
            backend = compat.task_backends["default"]
            return all(backend.get_result(m.id).is_finished for m in [*batch, later])

        wait_for(all_finished, 60)
        celery_log = celery.output()
    finally:
        for process in started:
            process.stop()
    for i, each in enumerate(batch):
        result = tasks.add.get_result(each.id)
        assert result.status == Status.SUCCESSFUL and result.return_value == i + 1
        assert result.worker_ids == [f"{pool}@{result.worker_ids[0].split('@')[1]}"]
        assert ms(at) <= ms(result.started_at) <= ms(result.finished_at)
    alone = tasks.reads_itself.get_result(later.id)
    assert alone.status == Status.SUCCESSFUL
    (seen,) = [run for run in tasks.reports() if run["kind"] == "reads_itself"]
    assert seen["status"] == "RUNNING" and seen["workers"] == alone.worker_ids
    assert len(tasks.reports(tasks.SIGNALS)) == 2 * (len(batch) + 1)
    assert "delayqueue.run_batch" in celery_log  # the 70 went in batches


def test_a_task_class_that_replaces_call_is_run_through_it(
    parked_celery: Celery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plain function is called straight (not through ``Task.call`` at each run); a task
    class whose ``call`` is not Django's own is still run through it, async tasks too."""
    from delayqueue.django_tasks import attempts

    calls: list[tuple[Any, ...]] = []
    django_call = type(tasks.add).call

    def counted(task: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return django_call(task, *args, **kwargs)

    monkeypatch.setattr(attempts, "_tasks", {})
    tasks.add.enqueue("plain", 2, 3)
    (message,) = dispatched(parked_celery)
    assert run_here(parked_celery, message) == 5
    monkeypatch.setattr(type(tasks.add), "call", counted)
    assert calls == []  # (the first run found Django's own call: the function ran straight)
    monkeypatch.setattr(attempts, "_tasks", {})
    made = tasks.add.enqueue("replaced", 4, 5)
    tasks.async_add.enqueue("async", 1, 1)
    messages = dispatched(parked_celery)
    assert sorted(run_here(parked_celery, m) for m in messages) == [2, 9]
    assert sorted(calls) == [("async", 1, 1), ("replaced", 4, 5)]
    assert tasks.add.get_result(made.id).return_value == 9
