"""A Django task's first start (``task_started.lua`` on a results hash that holds no
history): it reads nothing back, and what the Celery side then knows of the history it
wrote (``TaskStarted.result``: its start, its last start, its one worker) is what the hash
holds, whatever the worker's name; a later start reads the history back."""

from __future__ import annotations

import json

import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from delayqueue.engine.clients import get_raw_redis
from delayqueue.engine.execution import run_direct
from delayqueue.engine.keys import JobField, TaskResultField, queue_keys
from delayqueue.engine.task_results import TaskStarted, task_started
from tests.support.fuzzing import examples

Q = queue_keys("first")
JOB = "01JAAAAAAAAAAAAAAAAAAAAAAB"
RESULT = Q.task_result(JOB)


def start(now_ms: int, worker: str) -> TaskStarted:
    call = task_started(
        Q, JOB, now_ms=now_ms, worker=worker, ttl_seconds=60, kept=20, task="t.path",
        args="[1]", kwargs="{}", backend="default", priority="0", status="RUNNING",
    )  # fmt: skip
    found = run_direct(call)
    assert found is not None  # (no token: it always writes)
    return found


def text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@settings(max_examples=examples(40))
@given(worker=st.text(max_size=30), now_ms=st.integers(0, 253_402_300_799_999))
def test_a_first_start_reads_nothing_back_and_knows_what_it_wrote(worker: str, now_ms: int) -> None:
    raw = get_raw_redis()
    raw.delete(RESULT, Q.job(JOB))
    raw.hset(Q.job(JOB), mapping={JobField.ATTEMPTS: "1", JobField.MAX_ATTEMPTS: "3"})
    found = start(now_ms, worker)
    assert found.read is None and found.first  # nothing read back
    assert (found.attempt, found.max_attempts) == (1, 3)
    stored = {text(k): text(v) for k, v in raw.hgetall(RESULT).items()}
    assert found.result.started == found.result.last_attempt == stored[TaskResultField.STARTED]
    assert stored[TaskResultField.LAST_ATTEMPT] == str(now_ms)
    assert json.loads(found.result.workers or "") == json.loads(stored[TaskResultField.WORKERS])
    assert json.loads(stored[TaskResultField.WORKERS]) == [worker]
    assert found.result.errors is None and TaskResultField.ERRORS not in stored
    assert stored[TaskResultField.TASK] == "t.path" and stored[TaskResultField.ARGS] == "[1]"
    assert stored[TaskResultField.STATUS] == "RUNNING" and 0 < raw.ttl(RESULT) <= 60


def test_a_later_start_reads_the_history_back(r: redis.Redis) -> None:
    r.hset(Q.job(JOB), JobField.ATTEMPTS, "1")
    start(1_000, "w1")
    r.hset(RESULT, TaskResultField.ERRORS, json.dumps([["builtins.ValueError", "tb"]]))
    r.hset(Q.job(JOB), JobField.ATTEMPTS, "2")
    later = start(2_000, "w2")
    assert later.read is not None and not later.first
    assert later.result.started == "1000" and later.result.last_attempt == "2000"
    assert json.loads(later.result.workers or "") == ["w1", "w2"]
    assert json.loads(later.result.errors or "") == [["builtins.ValueError", "tb"]]
    # a first start that a hash of a finished attempt precedes (a planted or older outcome)
    r.delete(RESULT)
    r.hset(RESULT, mapping={TaskResultField.FINISHED: "7", TaskResultField.RETURN: "1"})
    again = start(3_000, "w3")
    assert again.read is not None and again.first
    assert TaskResultField.FINISHED not in r.hgetall(RESULT)
