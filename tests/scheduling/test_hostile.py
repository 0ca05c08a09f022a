"""Hostile and bad input: every bad call raises its documented exception and leaves Redis as
it was; data in Redis that is not ours or is corrupt goes to dead with a reason, the worker
keeps running, and nothing is ever unpickled."""

from __future__ import annotations

import math
import os
import pickle
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.test import override_settings

import delayqueue
from delayqueue import (
    DelayQueueError,
    InvalidDelay,
    InvalidJobId,
    InvalidQueueName,
    NotSerializable,
    PayloadTooLarge,
    UnknownTask,
)
from delayqueue.conf import DEFAULTS
from delayqueue.engine.keys import State, global_keys, queue_keys
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.corrupt import keys_of_the_test

Q = "tests"


def _deep(levels: int) -> list[Any]:
    top: list[Any] = []
    cur = top
    for _ in range(levels):
        cur.append([])
        cur = cur[0]
    return top


def _circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _key_set(r: redis.Redis) -> set[str]:
    return set(keys_of_the_test(r))


@pytest.fixture
def untouched(r: redis.Redis) -> Iterator[None]:
    """Assert that the test leaves no key behind in delayqueue's Redis."""
    delayqueue.enqueue(jobs.record, ["warm"], delay=60, queue=Q, on_commit=False)  # queue known
    before = _key_set(r), r.zcard(queue_keys("tests").scheduled)
    yield
    assert (_key_set(r), r.zcard(queue_keys("tests").scheduled)) == before


def enqueue(*args: Any, **kwargs: Any) -> delayqueue.Job:
    kwargs.setdefault("on_commit", False)
    kwargs.setdefault("queue", Q)
    if "delay" not in kwargs and "eta" not in kwargs:
        kwargs["delay"] = 10
    return delayqueue.enqueue(*args, **kwargs)


def rec(*args: Any, **kwargs: Any) -> delayqueue.Job:
    return enqueue(jobs.record, *args, **kwargs)


def later(*args: Any, **kwargs: Any) -> delayqueue.Job:
    return jobs.record.delay_for(*args, on_commit=False, **kwargs)


BAD_CALLS: list[tuple[str, type[Exception], Callable[[], object]]] = [
    # wrong types
    ("args is a str", NotSerializable, lambda: rec("abc")),
    ("args is a dict", NotSerializable, lambda: rec({"a": 1})),
    ("kwargs is a list", NotSerializable, lambda: rec([], ["x"])),
    ("delay is a str", InvalidDelay, lambda: rec(["x"], delay="10")),
    ("delay is a bool", InvalidDelay, lambda: rec(["x"], delay=True)),
    ("seconds= is a str", InvalidDelay, lambda: later("x", seconds="1")),
    ("two delays", InvalidDelay, lambda: later("x", seconds=1, minutes=1)),
    ("eta is a number", InvalidDelay, lambda: rec(["x"], eta=1e9)),
    ("delay and eta", InvalidDelay, lambda: rec(["x"], delay=1, eta=datetime.now(UTC))),
    ("key is an int", DelayQueueError, lambda: rec(["x"], key=123)),
    ("key is empty", DelayQueueError, lambda: rec(["x"], key="")),
    ("key is too long", DelayQueueError, lambda: rec(["x"], key="k" * 201)),
    ("on_conflict unknown", DelayQueueError, lambda: rec(["x"], on_conflict="drop")),
    ("max_attempts -1", DelayQueueError, lambda: rec(["x"], max_attempts=-1)),
    ("max_attempts 0", DelayQueueError, lambda: rec(["x"], max_attempts=0)),
    ("max_attempts str", DelayQueueError, lambda: rec(["x"], max_attempts="3")),
    ("visibility_timeout<0", DelayQueueError, lambda: rec(["x"], visibility_timeout=-5)),
    ("visibility_timeout 0", DelayQueueError, lambda: rec(["x"], visibility_timeout=0)),
    ("visibility_timeout inf", DelayQueueError, lambda: rec(["x"], visibility_timeout=math.inf)),
    # values that are not JSON
    ("an object", NotSerializable, lambda: rec([object()])),
    ("a set", NotSerializable, lambda: rec([{1, 2}])),
    ("bytes", NotSerializable, lambda: rec([b"abc"])),
    ("a datetime", NotSerializable, lambda: rec([datetime.now(UTC)])),
    ("a Decimal", NotSerializable, lambda: rec([Decimal("1.5")])),
    ("an int dict key", NotSerializable, lambda: rec([{1: "a"}])),
    ("NaN in args", NotSerializable, lambda: rec([math.nan])),
    ("inf in kwargs", NotSerializable, lambda: rec([], {"tag": math.inf})),
    ("a lone surrogate", NotSerializable, lambda: rec(["\ud800"])),
    ("10,000 nested lists", NotSerializable, lambda: rec([_deep(10_000)])),
    ("a list that holds itself", NotSerializable, lambda: rec([_circular()])),
    # delays
    ("NaN delay", InvalidDelay, lambda: rec(["x"], delay=math.nan)),
    ("inf delay", InvalidDelay, lambda: rec(["x"], delay=math.inf)),
    ("-inf seconds", InvalidDelay, lambda: later("x", seconds=-math.inf)),
    ("negative delay", InvalidDelay, lambda: rec(["x"], delay=-0.001)),
    ("negative timedelta", InvalidDelay, lambda: rec(["x"], delay=timedelta(days=-1))),
    ("minutes=1e307", InvalidDelay, lambda: later("x", minutes=1e307)),
    ("int delay of 400 digits", InvalidDelay, lambda: rec(["x"], delay=10**400)),
    ("seconds= of 400 digits", InvalidDelay, lambda: later("x", seconds=10**400)),
    ("beyond MAX_DELAY", InvalidDelay, lambda: rec(["x"], delay=DEFAULTS["MAX_DELAY"] + 1)),
    ("timedelta beyond", InvalidDelay, lambda: rec(["x"], delay=timedelta(days=9999))),
    ("eta beyond", InvalidDelay, lambda: rec(["x"], eta=datetime.now(UTC) + timedelta(days=800))),
    ("naive eta", InvalidDelay, lambda: rec(["x"], eta=datetime.now() + timedelta(minutes=1))),  # noqa: DTZ005
    (
        "naive delay_until",
        InvalidDelay,
        lambda: jobs.record.delay_until("x", eta=datetime(2030, 1, 1), on_commit=False),
    ),  # noqa: DTZ001
    ("reschedule NaN", InvalidDelay, lambda: delayqueue.reschedule(Q, key="k", delay=math.nan)),
    # queue names
    ("queue with braces", InvalidQueueName, lambda: rec(["x"], queue="a{b}")),
    ("queue with a space", InvalidQueueName, lambda: rec(["x"], queue="my queue")),
    ("queue with a colon", InvalidQueueName, lambda: rec(["x"], queue="a:b")),
    ("queue of 65 chars", InvalidQueueName, lambda: rec(["x"], queue="q" * 65)),
    ("queue not ASCII", InvalidQueueName, lambda: rec(["x"], queue="zürich")),
    ("queue newline", InvalidQueueName, lambda: rec(["x"], queue="q\n")),
    ("cancel on a braced queue", InvalidQueueName, lambda: delayqueue.cancel("{x}", key="k")),
    ("decorator queue", InvalidQueueName, lambda: delayqueue.delayed_task(queue="a b")),
    # task names and ids
    ("unknown task name", UnknownTask, lambda: enqueue("no.such.task", ["x"])),
    ("empty task name", UnknownTask, lambda: enqueue("", ["x"])),
    ("task is a number", UnknownTask, lambda: enqueue(42, ["x"])),
    ("cancel a bad id", InvalidJobId, lambda: delayqueue.cancel(Q, "../../etc/passwd")),
    (
        "cancel a lower-case id",
        InvalidJobId,
        lambda: delayqueue.cancel(Q, "01hzzzzzzzzzzzzzzzzzzzzzzz"),
    ),
    (
        "cancel id and key",
        InvalidJobId,
        lambda: delayqueue.cancel(Q, "01HZZZZZZZZZZZZZZZZZZZZZZZ", key="k"),
    ),
    ("cancel neither", InvalidJobId, lambda: delayqueue.cancel(Q)),
    ("reschedule a bad id", InvalidJobId, lambda: delayqueue.reschedule(Q, "x*", delay=1)),
]


@pytest.mark.parametrize(
    ("what", "error", "call"), BAD_CALLS, ids=[what for what, _, _ in BAD_CALLS]
)
def test_bad_call_raises_and_leaves_nothing(untouched, what, error, call):
    with pytest.raises(error) as caught:
        call()
    assert isinstance(caught.value, DelayQueueError)  # one base class catches them all
    assert str(caught.value)  # a message a person can act on


def test_payload_limit_is_configurable(untouched):
    limit = {**settings.DELAYQUEUE, "MAX_PAYLOAD_BYTES": 100}
    with override_settings(DELAYQUEUE=limit):
        delayqueue.spec(jobs.record, ["a" * 80], delay=1)  # fits (spec() checks, writes nothing)
        with pytest.raises(PayloadTooLarge, match="MAX_PAYLOAD_BYTES=100"):
            enqueue(jobs.record, ["é" * 60])  # 120 bytes of UTF-8 though 60 characters
        with pytest.raises(PayloadTooLarge):
            enqueue(jobs.record, [], {"tag": "a" * 200})


def test_huge_payload_is_refused_by_default(untouched):
    with pytest.raises(PayloadTooLarge, match="store the data elsewhere"):
        enqueue(jobs.record, ["x" * (DEFAULTS["MAX_PAYLOAD_BYTES"] + 1)])
    with pytest.raises(PayloadTooLarge):
        jobs.record.delay_many(
            [["x" * 40_000], ["y" * 40_000]] * 3 + [["z" * 70_000]], seconds=5, on_commit=False
        )


def test_max_delay_is_configurable(untouched):
    with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "MAX_DELAY": 60}):
        with pytest.raises(InvalidDelay, match="MAX_DELAY=60"):
            enqueue(jobs.record, ["x"], delay=61)
        with pytest.raises(InvalidDelay, match="MAX_DELAY=60"):
            jobs.record.delay_for("x", minutes=2, on_commit=False)


def test_delay_many_with_one_bad_call_writes_none(untouched):
    with pytest.raises(NotSerializable):
        jobs.record.delay_many([["a"], ["b"], [object()]], seconds=5, on_commit=False)


# ---- data in Redis that is not ours, or is corrupt -----------------------------------------


class Bomb:
    """Writes a marker directory when unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.marker,))


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "unpickled"
    yield path
    assert not path.exists(), "a pickled payload planted in Redis was loaded"


def _plant(raw: redis.Redis, job_id: str, fields: Mapping[Any, Any] | bytes | None,
           zset: State = "scheduled", score: int = 0) -> None:  # fmt: skip
    """A job written behind delayqueue's back: ``fields`` in its hash or, given as bytes, as
    the packed spec of a never-claimed job."""
    if isinstance(fields, bytes):
        raw.hset(queue_keys(Q).spec_bucket(job_id), job_id, fields)
    elif fields is not None:
        raw.hset(queue_keys(Q).job(job_id), mapping=fields)
    raw.zadd(queue_keys(Q).of_state(zset), {job_id: score})
    raw.sadd(global_keys().queues, Q)


def _raw() -> redis.Redis:
    return redis.Redis(port=int(os.environ["DQ_TEST_REDIS_PORT"]))  # bytes in, bytes out


def _id(n: int) -> str:
    return f"01HZZZZZZZZZZZZZZZZZZZZZ{n:02d}"


@pytest.fixture(autouse=True)
def _parked(parked_celery: Celery, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("delayqueue.worker.loop.get_celery_app", lambda: parked_celery)


def _run_worker_once() -> DelayWorker:
    worker = DelayWorker([Q])
    assert worker.run(once=True) == 0
    return worker


@pytest.mark.timeout(20)
def test_pickle_is_never_loaded_from_redis(r, marker):
    bomb = Bomb(str(marker))
    # protocol 0 is ASCII, the binary protocols are not UTF-8: both kinds, in every place.
    payloads = [pickle.dumps([bomb], protocol=0), pickle.dumps([bomb], protocol=5)]
    raw = _raw()
    planted: dict[str, Mapping[str, Any] | bytes] = {}
    for n, payload in enumerate(payloads):
        planted[_id(n)] = {"task": "tests.support.jobs.record", "args": payload, "max": "3"}
        planted[_id(n + 10)] = {
            "task": "tests.support.jobs.record",
            "args": "[]",
            "kwargs": payload,
        }
        planted[_id(n + 20)] = (
            b"tests.support.jobs.record\n" + payload + b"\n\n3\n\n"
        )  # packed spec
        planted[_id(n + 30)] = payload  # a pickle where a packed spec belongs
    for job_id, fields in planted.items():
        _plant(raw, job_id, fields)

    _run_worker_once()

    assert r.zcard(queue_keys("tests").scheduled) == r.zcard(queue_keys("tests").inflight) == 0
    assert set(r.zrange(queue_keys("tests").dead, 0, -1)) == set(planted)
    for job_id in planted:
        why = raw.hget(queue_keys("tests").job(job_id), "why")
        assert why is not None and b"corrupt" in why, (job_id, why)


@pytest.mark.timeout(20)
def test_corrupt_jobs_go_to_dead_with_a_reason_and_good_ones_still_run(r):
    raw = _raw()
    corrupt = {
        _id(1): (None, "missing"),  # an id with no hash at all
        _id(2): ({"task": "tests.support.jobs.record"}, "missing"),  # no args
        _id(3): ({"task": "tests.support.jobs.record", "args": "[not json"}, "corrupt"),
        _id(4): ({"task": "tests.support.jobs.record", "args": '{"a": 1}'}, "corrupt"),
        _id(5): ({"task": "tests.support.jobs.record", "args": "[]", "kwargs": "[1]"}, "corrupt"),
        _id(6): ({"task": "no.such.task", "args": "[]"}, "unknown task"),
        _id(7): ({"task": "os.system", "args": '["touch /tmp/x"]'}, "unknown task"),
        _id(8): ({"task": b"\xff\xfe", "args": "[]"}, "corrupt"),  # not UTF-8
        _id(9): ({"task": "tests.support.jobs.record", "args": '["x"]', "att": "many"}, "corrupt"),
        _id(10): ({"task": "tests.support.jobs.record", "args": '["x"]', "tok": "1.5"}, "corrupt"),
        # packed specs of never-claimed jobs (see delayqueue/engine/packing.py)
        _id(11): (b"tests.support.jobs.record", "corrupt"),  # not six fields
        _id(12): (b"\n\n\n\n\n", "corrupt"),  # six empty fields
        _id(13): (b"tests.support.jobs.record\n[not json\n\n3\n\n", "corrupt"),
        _id(14): (b"\xff\xfe\n[]\n\n3\n\n", "corrupt"),  # not UTF-8
        _id(15): (b"no.such.task\n[]\n\n3\n\n", "unknown task"),
        _id(16): (b"\n[]\n\n3\n\nkey", "missing"),  # no task
    }
    for job_id, (fields, _) in corrupt.items():
        _plant(raw, job_id, fields)
    good = jobs.record.delay_for("good", seconds=0, on_commit=False)

    worker = DelayWorker([Q])
    worker.run_pass()  # one pass settles every job: it neither raises nor leaves any behind
    assert worker.run(once=True) == 0

    assert r.zcard(queue_keys("tests").scheduled) == 0
    assert r.zrange(queue_keys("tests").inflight, 0, -1) == [good.id]  # dispatched despite the rest
    assert worker.dispatched == 1
    assert set(r.zrange(queue_keys("tests").dead, 0, -1)) == set(corrupt)
    for job_id, (_, reason) in corrupt.items():
        why = raw.hget(queue_keys("tests").job(job_id), "why")
        assert why is not None and reason.encode() in why, (job_id, why)
    # A second pass finds nothing to do: the worker does not spin on bad data.
    assert not worker.run_pass().claimed


def test_corrupt_history_of_a_timed_out_job_does_not_stop_the_worker(r):
    raw = _raw()
    # In flight, deadline long passed, with a history that is not JSON.
    task = "tests.support.jobs.record"
    _plant(raw, _id(1), {"task": task, "args": '["x"]', "att": "1", "tok": "1",
                         "began": "1", "max": "3", "hist": "{{{"}, zset="inflight")  # fmt: skip
    _plant(raw, _id(2), {"task": task, "args": '["x"]', "att": "3", "tok": "3",
                         "began": "3", "max": "3", "hist": "[1, 2"}, zset="inflight")  # fmt: skip
    worker = DelayWorker([Q])
    worker.run_pass()  # neither raises nor stops
    assert (
        r.zcard(queue_keys("tests").inflight) == 1
    )  # the first was reaped, claimed and dispatched
    assert r.zrange(queue_keys("tests").dead, 0, -1) == [_id(2)]
    assert worker.dispatched == 1


def test_foreign_keys_next_to_ours_are_left_alone(r):
    foreign = queue_keys("tests").scheduled + ":note"  # our prefix, not our key
    r.set(foreign, "not ours")
    r.hset("someone:else", "task", "tests.support.jobs.record")
    r.zadd(queue_keys("tests").scheduled, {_id(1): 0})  # an id without a job hash
    _run_worker_once()
    assert r.get(foreign) == "not ours"
    assert r.hgetall("someone:else") == {"task": "tests.support.jobs.record"}
    assert r.zrange(queue_keys("tests").dead, 0, -1) == [_id(1)]
