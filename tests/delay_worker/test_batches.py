"""The batched hand-off: several due jobs of one task in one Celery message, each begun,
acked, retried or buried on its own."""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.test import override_settings

import delayqueue
from delayqueue import signals
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import InvalidOption
from delayqueue.wire import RUN_BATCH
from delayqueue.worker.handoff import AUTO_BATCH_FROM, AUTO_BATCH_SIZE
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.celery_apps import parked_broker_url

Q = queue_keys("tests")


def published(celery_queue: str = "celery") -> list[dict[str, Any]]:
    """The messages on the parked broker's list, oldest first: task name, args, headers."""
    with redis.Redis.from_url(parked_broker_url()) as broker:
        raw = broker.lrange(celery_queue, 0, -1)
    out = []
    for item in reversed(raw):
        envelope = json.loads(item)
        args, kwargs, _ = json.loads(base64.b64decode(envelope["body"]))
        out.append(
            {"task": envelope["headers"]["task"], "args": args, "headers": envelope["headers"]}
        )
    return out


def run_messages(app: Celery, messages: list[dict[str, Any]]) -> list[Any]:
    """Run published messages in this process as the Celery worker would."""
    results = []
    for message in messages:
        task = app.tasks[message["task"]]
        results.append(task.apply(args=tuple(message["args"]), headers=message["headers"]).result)
    return results


def test_jobs_of_a_batched_task_go_several_to_a_message_and_each_is_settled(
    r: redis.Redis, parked_celery: Celery
) -> None:
    tags = [f"ok{i}" for i in range(10)] + ["fail-1", "ok10"]
    made = jobs.batched.delay_many([(tag,) for tag in tags], seconds=0, on_commit=False)
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    messages = published()
    assert [m["task"] for m in messages] == [RUN_BATCH] * 3
    assert [len(m["args"][2]) for m in messages] == [5, 5, 2]
    assert {m["args"][0] for m in messages} == {"tests"}
    assert {m["args"][1] for m in messages} == {"tests.support.jobs.batched"}
    entries = [entry for m in messages for entry in m["args"][2]]
    assert sorted(e[0] for e in entries) == sorted(j.id for j in made)
    for job_id, token, _args, kwargs, due in entries:
        assert r.hget(Q.job(job_id), "tok") == token and kwargs == {} and isinstance(due, int)
    assert messages[0]["headers"]["dq_batch"] == "5"

    assert sum(run_messages(parked_celery, messages)) == 11  # succeeded, of 12
    assert sorted(str(run["tag"]) for run in jobs.ran("batched")) == sorted(tags)
    failed = made[tags.index("fail-1")]
    assert r.zcard(Q.inflight) == 0
    assert r.zrange(Q.scheduled, 0, -1) == [failed.id]  # retried after its backoff
    assert r.hget(Q.job(failed.id), "err") == "ValueError: boom fail-1"
    for job in made:
        if job.id != failed.id:
            assert not r.exists(Q.job(job.id))  # acked


def test_a_stale_or_forged_entry_of_a_batch_does_not_run(
    r: redis.Redis, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    jobs.batched.delay_many([("a",), ("b",)], seconds=0, on_commit=False)
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    [message] = published()
    entries = message["args"][2]
    kept, stale = entries[0], entries[1]
    stale[1] = str(int(stale[1]) + 7)  # a token this dispatch never had
    entries.append(["../../etc", "1", [], {}, None])  # no job id delayqueue writes
    entries.append("not an entry")
    with caplog.at_level(logging.WARNING):
        [succeeded] = run_messages(parked_celery, [message])
    assert succeeded == 1
    assert [run["tag"] for run in jobs.ran("batched")] == kept[2]
    assert r.zscore(Q.inflight, stale[0]) is not None  # left for the reaper, not run
    assert "2 entries are not delayqueue dispatches" in caplog.text
    assert "stale dispatch" in caplog.text


def test_each_job_of_a_batch_sends_its_own_signals(r: redis.Redis, parked_celery: Celery) -> None:
    seen: list[tuple[str, str]] = []

    def started(sender: str, job_id: str, **kw: Any) -> None:
        seen.append(("started", job_id))

    def succeeded(sender: str, job_id: str, **kw: Any) -> None:
        seen.append(("succeeded", job_id))

    signals.job_started.connect(started)
    signals.job_succeeded.connect(succeeded)
    try:
        jobs.batched.delay_many([("x",), ("y",)], seconds=0, on_commit=False)
        DelayWorker(["tests"], celery_app=parked_celery).run_pass()
        [message] = published()
        first, second = (entry[0] for entry in message["args"][2])
        run_messages(parked_celery, [message])
    finally:
        signals.job_started.disconnect(started)
        signals.job_succeeded.disconnect(succeeded)
    # Each job starts when it runs; its success is sent once the batch's acks are written.
    assert seen == [
        ("started", first),
        ("started", second),
        ("succeeded", first),
        ("succeeded", second),
    ]


def test_a_long_batch_begins_its_later_jobs_again_before_they_could_be_reaped(
    r: redis.Redis, parked_celery: Celery
) -> None:
    made = jobs.deadline_probe.delay_many(
        [(f"p{i}", 0.2) for i in range(4)], seconds=0, on_commit=False
    )
    # (the delay worker's visibility timeout travels with the batch: the Celery side's
    # setting, far longer, does not decide)
    DelayWorker(["tests"], celery_app=parked_celery, visibility_timeout=0.5).run_pass()
    [message] = published()
    assert len(message["args"][2]) == 4
    with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "VISIBILITY_TIMEOUT": 600}):
        run_messages(parked_celery, [message])
    reports = [str(run["tag"]).split() for run in jobs.ran("deadline")]
    left = {name: float(seconds) for name, seconds in reports}
    assert set(left) == {"p0", "p1", "p2", "p3"}
    # Without the second begin, p3 would start 0.6 s after its deadline was set 0.5 s ahead.
    assert all(seconds > 0.2 for seconds in left.values()), left
    assert r.zcard(Q.inflight) == 0 and all(not r.exists(Q.job(j.id)) for j in made)


def test_automatic_batches_under_a_backlog_only_and_never_with_limits(
    r: redis.Redis, parked_celery: Celery
) -> None:
    jobs.record.delay_many([(f"few{i}",) for i in range(5)], seconds=0, on_commit=False)
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    assert [m["task"] for m in published()] == ["tests.support.jobs.record"] * 5

    with redis.Redis.from_url(parked_broker_url()) as broker:
        broker.delete("celery")
    count = AUTO_BATCH_FROM + 6
    jobs.record.delay_many([(f"many{i}",) for i in range(count)], seconds=0, on_commit=False)
    jobs.limited.delay_many([(f"lim{i}",) for i in range(count)], seconds=0, on_commit=False)
    jobs.unbatched.delay_many([(f"one{i}",) for i in range(count)], seconds=0, on_commit=False)
    DelayWorker(["tests"], celery_app=parked_celery, claim_size=1_000).run_pass()
    messages = published()
    batches = [m for m in messages if m["task"] == RUN_BATCH]
    assert {m["args"][1] for m in batches} == {"tests.support.jobs.record"}
    assert sum(len(m["args"][2]) for m in batches) == count
    assert max(len(m["args"][2]) for m in batches) == min(AUTO_BATCH_SIZE, -(-count // 4))
    assert len(batches) == 4
    singles = [m["task"] for m in messages if m["task"] != RUN_BATCH]
    assert singles.count("tests.support.jobs.limited") == count  # a time limit is a job's own
    assert singles.count("tests.support.jobs.unbatched") == count  # batch=1


@pytest.mark.parametrize("bad", [0, -1, 1_001, True, 2.5, "3"])
def test_batch_option_is_checked_when_the_task_is_made(bad: Any) -> None:
    with pytest.raises(InvalidOption, match="batch must be an integer from 1 to 1000"):
        delayqueue.delayed_task(batch=bad)(lambda: None)


def test_a_batch_message_of_an_unknown_task_runs_nothing(parked_celery: Celery) -> None:
    task = parked_celery.tasks[RUN_BATCH]
    assert task.apply(args=("tests", "no.such.task", [["X", "1", [], {}, None]])).result == 0
    assert task.apply(args=("tests", "tests.support.jobs.batched", "not a list")).result == 0


def test_the_worker_readies_the_publisher_for_every_delayed_task_before_the_first_job(
    parked_celery: Celery,
) -> None:
    from delayqueue.worker.publisher_choice import RedisListPublisher

    worker = DelayWorker(["tests"], celery_app=parked_celery)
    publisher = worker.dispatcher.publisher
    assert isinstance(publisher, RedisListPublisher) and not publisher._routes
    worker.dispatcher.warm_up()
    assert publisher._client is not None
    for name in ("tests.support.jobs.record", "tests.support.jobs.batched"):
        assert publisher._routes[(name, name)] is not None
        assert publisher._routes[(RUN_BATCH, name)] is not None
    assert "celery" in publisher._declared
    with redis.Redis.from_url(parked_broker_url()) as broker:
        assert broker.llen("celery") == 0  # nothing was sent


def test_a_backlog_on_the_broker_makes_a_pass_batch_its_few_jobs(
    r: redis.Redis, parked_celery: Celery
) -> None:
    """Each pass claims few jobs, but the Celery workers are behind (messages wait on the
    broker's list): the jobs of a pass go in one message, and the worker says it is behind."""
    from delayqueue.worker.handoff import BACKLOG_FROM

    worker = DelayWorker(["tests"], celery_app=parked_celery)
    jobs.record.delay_many([(f"a{i}",) for i in range(3)], seconds=0, on_commit=False)
    worker.run_pass()
    assert [m["task"] for m in published()] == [
        "tests.support.jobs.record"
    ] * 3  # not behind: singles
    assert worker.dispatcher.publisher.waiting == 0 and not worker.dispatcher.behind()

    with redis.Redis.from_url(parked_broker_url()) as broker:
        broker.delete("celery")
        broker.lpush("celery", *[f"queued-{i}" for i in range(BACKLOG_FROM)])
    jobs.record.delay_many([("b0",)], seconds=0, on_commit=False)
    worker.run_pass()  # its publish finds the backlog
    assert worker.dispatcher.publisher.waiting == BACKLOG_FROM and worker.dispatcher.behind()
    made = jobs.record.delay_many([(f"c{i}",) for i in range(5)], seconds=0, on_commit=False)
    worker.run_pass()
    with redis.Redis.from_url(parked_broker_url()) as broker:
        newest = json.loads(broker.lindex("celery", 0))
    assert newest["headers"]["task"] == RUN_BATCH
    entries = json.loads(base64.b64decode(newest["body"]))[0][2]
    assert sorted(entry[0] for entry in entries) == sorted(job.id for job in made)


def run_in_worker(app: Celery, message: dict[str, Any]) -> Any:
    """Run a published message in this process as a Celery worker's pool process does: not
    eagerly (a worker's request, its headers as attributes)."""
    task = app.tasks[message["task"]]
    headers = message["headers"]
    task.push_request(
        headers=headers, is_eager=False, hostname="worker@test", delivery_info={}, **headers
    )
    try:
        return task.run(*message["args"])
    finally:
        task.pop_request()


def test_closing_old_database_connections_between_a_batchs_jobs_never_fails_a_job_that_ran(
    r: redis.Redis, parked_celery: Celery, django_db_blocker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from django.db import connection

    made = jobs.batched.delay_many([("ok1",), ("ok2",)], seconds=0, on_commit=False)
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    [message] = published()
    with django_db_blocker.unblock():
        connection.ensure_connection()  # left open, as by a task that used the database
    try:
        # After each job the worker checks its open connections; that check raises here
        # (pytest-django's blocker, where production would meet a database gone away).
        with caplog.at_level(logging.WARNING, logger="delayqueue.tasks"):
            assert run_in_worker(parked_celery, message) == 2
    finally:
        with django_db_blocker.unblock():
            connection.close()
    assert sorted(str(run["tag"]) for run in jobs.ran("batched")) == ["ok1", "ok2"]
    for job in made:
        assert not r.exists(Q.job(job.id))  # acked, not retried
    assert r.zcard(Q.scheduled) == 0
    assert "closing old database connections failed" in caplog.text


@pytest.mark.django_db
def test_a_batch_run_eagerly_leaves_its_callers_transaction_alone(
    r: redis.Redis, parked_celery: Celery
) -> None:
    from django.contrib.auth.models import Group

    Group.objects.create(name="kept")  # inside the test's transaction
    jobs.batched.delay_many([("ok1",), ("ok2",)], seconds=0, on_commit=False)
    DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    assert sum(run_messages(parked_celery, published())) == 2  # eager: task.apply
    assert list(Group.objects.values_list("name", flat=True)) == ["kept"]


def test_behind_a_backlog_on_the_broker_a_pass_sends_its_many_jobs_in_one_message(
    r: redis.Redis, parked_celery: Celery
) -> None:
    """Messages wait on the broker's list (the Celery workers are behind): a pass's many
    jobs of a task go in one message up to BACKLOG_BATCH_SIZE, not spread over
    AUTO_BATCH_SPLIT (each message costs the Celery worker its own work)."""
    from delayqueue.worker.handoff import BACKLOG_BATCH_SIZE, BACKLOG_FROM

    worker = DelayWorker(["tests"], celery_app=parked_celery, claim_size=1_000)
    with redis.Redis.from_url(parked_broker_url()) as broker:
        broker.lpush("celery", *[f"queued-{i}" for i in range(BACKLOG_FROM)])
    jobs.record.delay_many([("b0",)], seconds=0, on_commit=False)
    worker.run_pass()  # its publish finds the backlog
    assert worker.dispatcher.behind()
    count = BACKLOG_BATCH_SIZE + AUTO_BATCH_FROM
    made = jobs.record.delay_many([(f"c{i}",) for i in range(count)], seconds=0, on_commit=False)
    worker.run_pass()
    with redis.Redis.from_url(parked_broker_url()) as broker:
        raw = broker.lrange("celery", 0, 1)  # the newest two
    bodies = [json.loads(base64.b64decode(json.loads(item)["body"])) for item in raw]
    sizes = sorted(len(body[0][2]) for body in bodies)
    assert sizes == [AUTO_BATCH_FROM, BACKLOG_BATCH_SIZE]
    sent = {entry[0] for body in bodies for entry in body[0][2]}
    assert sent == {job.id for job in made}
