"""``engine/direct_pipeline.py``: several script calls in one round trip on a direct
connection (a Django task's begin and start, its outcome and ack: delayqueue/runner/
riders.py), on the suite's Redis: the calls run in order, each reply its own, a script
Redis never saw is loaded in the same round trip before the calls, scripts Redis lost and a
connection it dropped cost a second round trip, never a call."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hiredis import pack_command

from delayqueue.engine import direct, direct_pipeline
from delayqueue.engine.direct_pipeline import run_many_direct
from delayqueue.engine.keys import TaskResultField, queue_keys
from delayqueue.engine.task_results import task_finished
from delayqueue.errors import DelayQueueError

Q = queue_keys("pipelined")


def packed(*command: Any) -> bytes:
    return pack_command(command)


def outcome(job_id: str, status: str) -> Any:
    return task_finished(Q, job_id, 60, status=status, finished_ms=1_000)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """What each round trip of the direct pipelines sent."""
    seen: list[bytes] = []
    exchange = direct._Link.exchange_all

    def counted(link: Any, packed: bytes, count: int) -> list[Any]:
        seen.append(packed)
        return exchange(link, packed, count)

    monkeypatch.setattr(direct._Link, "exchange_all", counted)
    yield seen


def test_the_calls_run_in_order_in_one_round_trip_each_reply_its_own(
    r: redis.Redis, sent: list[bytes]
) -> None:
    r.set(Q.task_result("B"), "someone else's string")
    run_many_direct([outcome("A", "RUNNING")])  # (its script loaded)
    sent.clear()
    replies = run_many_direct(
        [outcome("A", "SUCCESSFUL"), outcome("B", "SUCCESSFUL"), outcome("A", "FAILED")]
    )
    assert replies[0] is True and replies[2] is True
    assert isinstance(replies[1], DelayQueueError)  # its own error; the others ran
    assert r.hget(Q.task_result("A"), TaskResultField.STATUS) == "FAILED"  # the last one
    assert r.get(Q.task_result("B")) == "someone else's string"
    assert len(sent) == 1 and sent[0].count(b"EVALSHA") == 3


def test_a_script_redis_never_saw_is_loaded_before_the_calls_in_the_same_round_trip(
    r: redis.Redis, sent: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """So no call is refused while a later one runs (an outcome before its ack)."""
    r.script_flush()
    monkeypatch.setattr(direct_pipeline, "_loaded", set())  # as in a new process
    assert run_many_direct([outcome("A", "SUCCESSFUL"), outcome("C", "FAILED")]) == [True] * 2
    assert len(sent) == 1
    assert sent[0].index(b"SCRIPT") < sent[0].index(b"EVALSHA")
    run_many_direct([outcome("A", "FAILED")])
    assert b"SCRIPT" not in sent[1]  # once per process


def test_scripts_redis_lost_are_loaded_and_the_refused_calls_sent_again(
    r: redis.Redis, sent: list[bytes]
) -> None:
    run_many_direct([outcome("A", "RUNNING")])
    r.script_flush()  # (a restart)
    sent.clear()
    assert run_many_direct([outcome("A", "SUCCESSFUL")]) == [True]
    assert r.hget(Q.task_result("A"), TaskResultField.STATUS) == "SUCCESSFUL"
    assert len(sent) == 2 and b"SCRIPT" in sent[1]


def test_a_connection_redis_dropped_while_idle_is_replaced_and_the_calls_sent_again(
    r: redis.Redis, sent: list[bytes]
) -> None:
    run_many_direct([outcome("A", "RUNNING")])
    pipes = direct.connections()
    assert len(pipes._idle) == 1
    (link,) = pipes._idle
    r.client_kill_filter(_id=link.exchange(packed("CLIENT", "ID")))
    sent.clear()
    assert run_many_direct([outcome("A", "SUCCESSFUL")]) == [True]
    assert r.hget(Q.task_result("A"), TaskResultField.STATUS) == "SUCCESSFUL"
    assert len(sent) == 2  # the dropped one, then the same calls on a new connection
    assert pipes._idle[0] is link and link.exchange(packed("PING")) == "PONG"
