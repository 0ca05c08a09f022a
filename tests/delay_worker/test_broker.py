"""The publishers: the Redis fast path sends exactly what send_task sends, a stock Celery
worker runs it, a batch goes out whole, and other brokers fall back to send_task."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery, signals
from django.core.exceptions import ImproperlyConfigured
from kombu import Exchange, Queue

import delayqueue
from delayqueue.engine.keys import current_minute, queue_keys
from delayqueue.worker.loop import DelayWorker
from delayqueue.worker.publisher_choice import (
    PublishError,
    RedisListPublisher,
    SendTaskPublisher,
    TaskMessage,
    publisher_for,
)
from delayqueue.worker.redis_list_publisher import SEND_TASK_SENDS_TASK_LIMITS
from tests.support import jobs
from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import wait_for

PORT = int(os.environ["DQ_TEST_REDIS_PORT"])
DB = 4  # broker databases of these tests (DB and DB + 1): the Celery worker uses 1, test_worker 2
HEADERS = {"dq_queue": "q", "dq_id": "01J0000000000000000000000", "dq_token": "7"}


@pytest.fixture
def broker(r: redis.Redis) -> Iterator[redis.Redis]:
    """Database DB of the suite's Redis (``r`` checked it is ours), empty."""
    yield from _empty_db(DB)


@pytest.fixture
def broker2(r: redis.Redis) -> Iterator[redis.Redis]:
    yield from _empty_db(DB + 1)


def _empty_db(db: int) -> Iterator[redis.Redis]:
    client = redis.Redis(port=PORT, db=db)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


def make_app(url: str = f"redis://127.0.0.1:{PORT}/{DB}", **conf: Any) -> Celery:
    """An app of its own; publishers use the write URL (CELERY_BROKER_URL in the environment
    overrides ``broker_url``, not ``broker_write_url``)."""
    app = Celery("broker-tests", set_as_current=False)
    app.conf.update(
        broker_write_url=url,
        task_serializer="json",
        task_ignore_result=True,
        **conf,
    )

    @app.task(name="limited.task", time_limit=30, soft_time_limit=20, shared=False)
    def limited() -> None: ...

    app.finalize()  # as in a delay worker, which has imported every task
    return app


def snapshot(client: redis.Redis) -> dict[Any, Any]:
    """Every key of the broker database, messages with their per-send ids blanked."""
    state: dict[Any, Any] = {}
    for key in client.keys("*"):
        kind = client.type(key)
        if kind == b"list":
            state[key] = [normalise(raw) for raw in client.lrange(key, 0, -1)]
        elif kind == b"set":
            state[key] = client.smembers(key)
        else:
            state[key] = kind
    return state


def normalise(raw: Any) -> dict[str, Any]:
    message = json.loads(raw)
    headers, properties = message["headers"], message["properties"]
    assert headers["id"] == headers["root_id"] == properties["correlation_id"]
    for name in ("id", "root_id"):
        headers[name] = "<id>"
    properties["correlation_id"] = properties["delivery_tag"] = "<id>"
    assert properties["reply_to"]  # the app's oid: one per app
    properties["reply_to"] = "<oid>"
    message["body"] = json.loads(base64.b64decode(message["body"]))
    return message


def messages() -> list[TaskMessage]:
    return [
        TaskMessage("tests.support.jobs.record", ["a"], {}, HEADERS, "tests.support.jobs.record"),
        TaskMessage("other.task", [1, "é", None], {"k": [1.5, True]}, HEADERS, "other.task"),
        TaskMessage("prio.task", [2], {}, HEADERS, "prio.task"),
        TaskMessage("limited.task", [], {}, HEADERS, "limited.task"),
        TaskMessage("delayqueue.run_task", ["x", [3], {}], {}, HEADERS, "topic.task"),
        TaskMessage("tests.support.jobs.record", ["b"], {}, HEADERS, "tests.support.jobs.record"),
    ]


ROUTES = {
    "other.task": {"queue": "other"},
    "prio.task": {"queue": "prio", "priority": 5},  # kombu's list "prio\x06\x163"
    "topic.task": {"queue": "topical"},
}


@pytest.mark.parametrize("transport_options", [{}, {"global_keyprefix": "pfx:"}])
def test_fast_path_writes_what_send_task_writes(broker, broker2, transport_options):
    def app(db: int) -> Celery:
        return make_app(
            f"redis://127.0.0.1:{PORT}/{db}",
            task_routes=ROUTES,
            task_queues=[
                Queue("celery"),
                Queue("other"),
                Queue("prio"),
                Queue("topical", Exchange("topics", type="topic"), routing_key="t.#"),
            ],
            broker_transport_options=transport_options,
        )

    SendTaskPublisher(app(DB)).publish(messages())
    expected = snapshot(broker)

    fast = publisher_for(app(DB + 1))
    assert isinstance(fast, RedisListPublisher)
    fast.publish(messages())
    assert snapshot(broker2) == expected

    prefix = transport_options.get("global_keyprefix", "").encode()
    assert len(expected[prefix + b"celery"]) == 3  # record twice, limited.task
    assert len(expected[prefix + b"prio\x06\x163"]) == 1
    [run_task] = expected[prefix + b"topical"]  # the topic exchange went through send_task
    assert run_task["headers"]["task"] == "delayqueue.run_task"
    assert fast._route_of(messages()[4]) is None
    timelimits = [m["headers"]["timelimit"] for ms in expected.values() if isinstance(ms, list)
                  for m in ms if m["headers"]["task"] == "limited.task"]  # fmt: skip
    # (the task's own limits: in the header from Celery 5.7 on, applied by the worker before)
    assert timelimits == ([[30, 20]] if SEND_TASK_SENDS_TASK_LIMITS else [[None, None]])


def test_fast_path_jobs_run_and_are_acked_by_a_real_celery_worker(celery_worker, r):
    worker = DelayWorker(["tests"])
    assert isinstance(worker.publisher, RedisListPublisher)
    ids = [jobs.record.delay_for(f"fast-{i}", seconds=0, on_commit=False).id for i in range(3)]
    ids.append(jobs.record.delay_for(tag="by-keyword", seconds=0, on_commit=False).id)
    plain = delayqueue.enqueue(
        "tests.support.jobs.plain", ["plain"], delay=0, queue="tests", on_commit=False
    )
    ids.append(plain.id)

    worker.run(once=True)

    assert worker.dispatched == 5
    wait_for(lambda: len(jobs.ran()) == 5)
    assert sorted(str(run["tag"]) for run in jobs.ran()) == [
        "by-keyword", "fast-0", "fast-1", "fast-2", "plain",
    ]  # fmt: skip
    # Acked: the task saw dq_queue, dq_id and dq_token as request attributes and the fencing
    # token matched (without them a @delayed_task runs as a plain call and acks nothing).
    wait_for(lambda: r.zcard(queue_keys("tests").inflight) == 0)
    assert not any(r.exists(queue_keys("tests").job(job_id)) for job_id in ids)
    minute = current_minute()
    acked = [r.hget(queue_keys("tests").stats(m), "acked") for m in (minute - 1, minute)]
    assert sum(int(n or 0) for n in acked) == 5


def test_a_batch_counts_only_the_leading_pushes_that_went_out(broker):
    app = make_app(task_routes={"b.task": {"queue": "qb"}})
    publisher = publisher_for(app)
    publisher.publish([TaskMessage("b.task", [0], {}, HEADERS, "b.task")])  # declares qb
    broker.delete("qb")
    broker.set("qb", "not a list")  # so LPUSH onto it fails inside EXEC
    batch = [
        TaskMessage("a.task", [1], {}, HEADERS, "a.task"),
        TaskMessage("a.task", [2], {}, HEADERS, "a.task"),
        TaskMessage("b.task", [3], {}, HEADERS, "b.task"),
        TaskMessage("a.task", [4], {}, HEADERS, "a.task"),
    ]
    with pytest.raises(PublishError) as caught:
        publisher.publish(batch)
    assert caught.value.published == 2
    assert "WRONGTYPE" in str(caught.value.cause)


def test_broker_down_publishes_nothing_then_recovers(r):
    port = free_port()
    app = make_app(f"redis://127.0.0.1:{port}/0")
    publisher = publisher_for(app)
    batch = [TaskMessage("a.task", [i], {}, HEADERS, "a.task") for i in range(3)]
    with pytest.raises(PublishError) as caught:
        publisher.publish(batch)
    assert caught.value.published == 0

    server = RedisServer(port=port).start()
    try:
        publisher.publish(batch)
        assert server.client().llen("celery") == 3
    finally:
        server.cleanup()


def test_publish_signal_receivers_get_send_task(broker):
    seen: list[str] = []

    def receiver(sender: str, headers: dict[str, Any], **kwargs: Any) -> None:
        seen.append(sender)
        headers["traced"] = "yes"

    app = make_app()
    publisher = publisher_for(app)
    signals.before_task_publish.connect(receiver, weak=False)
    try:
        publisher.publish([TaskMessage("a.task", [1], {}, HEADERS, "a.task")])
    finally:
        signals.before_task_publish.disconnect(receiver)
    assert seen == ["a.task"]
    assert json.loads(broker.lpop("celery") or b"")["headers"]["traced"] == "yes"


def test_other_brokers_and_the_setting_fall_back_to_send_task(settings):
    amqp = make_app("amqp://guest:guest@127.0.0.1:5672//")
    assert isinstance(publisher_for(amqp), SendTaskPublisher)  # and no connection was made
    assert isinstance(publisher_for(make_app(task_compression="gzip")), SendTaskPublisher)
    assert isinstance(publisher_for(make_app()), RedisListPublisher)

    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "DISPATCH_MODE": "send_task"}
    assert isinstance(publisher_for(make_app()), SendTaskPublisher)
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "DISPATCH_MODE": "fast please"}
    with pytest.raises(ImproperlyConfigured, match="DISPATCH_MODE"):
        publisher_for(make_app())
