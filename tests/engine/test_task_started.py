"""``task_started.lua`` (a Django task's attempt begins: RUNNING, its worker, its times, in
the same step as the read of what earlier attempts recorded), on the suite's Redis, with
what it must survive: its own earlier writes, a results hash someone else wrote, a job
that has no hash."""

from __future__ import annotations

import json

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from delayqueue.engine.clients import get_raw_redis
from delayqueue.engine.execution import run, run_direct
from delayqueue.engine.keys import JobField, TaskResultField, queue_keys
from delayqueue.engine.task_results import TaskStarted, task_finished, task_started
from delayqueue.errors import DelayQueueError
from tests.support.corrupt import NOT_UTF8
from tests.support.fuzzing import examples

Q = queue_keys("ts")
JOB = "01JAAAAAAAAAAAAAAAAAAAAAAA"
RESULT = Q.task_result(JOB)


def start(now_ms: int, worker: str, kept: int = 3, task: str = "t.path") -> TaskStarted:
    call = task_started(
        Q, JOB, now_ms=now_ms, worker=worker, ttl_seconds=60, kept=kept, task=task,
        args="[]", kwargs="{}", backend="default", priority="0", status="RUNNING",
    )  # fmt: skip
    found = run_direct(call)
    assert found is not None  # (no token: it always writes)
    return found


def test_each_attempt_adds_its_worker_and_keeps_the_first_start(r: redis.Redis) -> None:
    r.hset(Q.job(JOB), mapping={JobField.ATTEMPTS: "1", JobField.MAX_ATTEMPTS: "5"})
    r.hset(RESULT, mapping={TaskResultField.FINISHED: "7", TaskResultField.RETURN: "1"})
    first = start(1_000, "w1", task="t.path")
    assert first.attempt == 1 and first.max_attempts == 5
    assert first.result.started == first.result.last_attempt
    assert first.result.started == "1000"
    assert json.loads(first.result.workers or "") == ["w1"]
    stored = r.hgetall(RESULT)
    assert TaskResultField.FINISHED not in stored  # a run before this one's outcome
    assert TaskResultField.RETURN not in stored
    assert stored[TaskResultField.TASK] == "t.path" and stored[TaskResultField.STATUS] == "RUNNING"
    read_back = {TaskResultField.STARTED: first.result.started,
                 TaskResultField.LAST_ATTEMPT: first.result.last_attempt,
                 TaskResultField.WORKERS: first.result.workers,
                 TaskResultField.ERRORS: first.result.errors}  # fmt: skip
    assert {k: stored.get(k) for k in read_back} == read_back and 0 < r.ttl(RESULT) <= 60
    for attempt, worker in enumerate(["w2", "w3", "w4"], start=2):
        r.hset(Q.job(JOB), JobField.ATTEMPTS, str(attempt))
        later = start(1_000 * attempt, worker)
        assert later.attempt == attempt and r.hget(RESULT, TaskResultField.ATTEMPT) == str(attempt)
        assert later.result.started == "1000"
        assert later.result.last_attempt == str(1_000 * attempt)
    assert json.loads(r.hget(RESULT, TaskResultField.WORKERS) or "") == ["w2", "w3", "w4"]
    # the same call sent again (its reply was lost) adds nothing
    again = start(4_000, "w4")
    assert json.loads(again.result.workers or "") == ["w2", "w3", "w4"]


def test_what_it_reads_back_is_utf8_whatever_was_stored(r: redis.Redis) -> None:
    """Its reply is read on the direct connections, which decode it: planted bytes that
    are not UTF-8 come back escaped, never as a decoding error."""
    r.hset(Q.job(JOB), mapping={JobField.ATTEMPTS: "2", JobField.MAX_ATTEMPTS: b"\xff"})
    r.hset(RESULT, mapping={TaskResultField.ERRORS: b"[\xfe]", TaskResultField.STARTED: b"\xff"})
    found = start(5, "w")
    assert found.attempt == 2 and found.max_attempts == 0  # unreadable: dead at a failure
    assert found.result.errors == "[\\xfe]"


@pytest.mark.parametrize(
    "workers", ['{"a": 1}', "not json", '["ok", 5, null, "fine"]', '"w"', "[" * 70_000]
)
def test_a_workers_list_that_is_not_one_of_str_is_mended(r: redis.Redis, workers: str) -> None:
    r.hset(RESULT, TaskResultField.WORKERS, workers)
    found = json.loads(start(1, "me").result.workers or "")
    assert found == (["ok", "fine", "me"] if workers.startswith('["ok"') else ["me"])


def test_a_job_without_a_hash_is_attempt_1_with_the_default_max(r: redis.Redis) -> None:
    assert start(1, "w")[:2] == (1, None)
    r.set(Q.job(JOB), "not a hash")
    r.hset(RESULT, TaskResultField.ATTEMPT, "9")
    assert start(2, "w")[:2] == (1, None)
    assert r.hget(RESULT, TaskResultField.ATTEMPT) == "1"


def test_a_results_key_of_another_type_is_an_error_and_is_left_alone(r: redis.Redis) -> None:
    r.set(RESULT, "someone else's")
    with pytest.raises(DelayQueueError, match="WRONGTYPE"):
        start(1, "w")
    assert r.get(RESULT) == "someone else's"


@pytest.mark.parametrize("bad", [{"now_ms": "soon"}, {"ttl_seconds": 0}, {"kept": 0}])
def test_bad_arguments_write_nothing(r: redis.Redis, bad: dict[str, object]) -> None:
    arguments: dict[str, object] = {"now_ms": 1, "ttl_seconds": 5, "kept": 2, **bad}
    call = task_started(
        Q, JOB, worker="w", task="t", args="[]", kwargs="{}", backend="b", priority="0",
        status="RUNNING", **arguments,  # type: ignore[arg-type]
    )  # fmt: skip
    with pytest.raises(DelayQueueError, match="task_started"):
        run(call, as_bytes=True)
    assert not r.exists(RESULT)


STORED = [None, b"", b"x", NOT_UTF8, b"[]", b"{}", b"null", b'["a", 1, ["b"]]', b'"w"',
          b"[" * 3000 + b"]" * 3000, b'["' + b"w" * 70_000 + b'"]', b'["a\\u00e9", "b"]',
          b"1", b"999999999999999999", b"999999999999999", b"-1", b"nan", b"1000", b"1e3",
          b"1000.5", b"0"]  # fmt: skip
MAX_TIME_MS = 253_402_300_799_999  # the end of the year 9999
RESULT_FIELDS = ["workers", "att", "last", "started", "errors", "finished", "ret"]


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(
    stored=st.fixed_dictionaries({name: st.sampled_from(STORED) for name in RESULT_FIELDS}),
    job=st.fixed_dictionaries({"att": st.sampled_from(STORED), "max": st.sampled_from(STORED)}),
    worker=st.text(max_size=20),
    kept=st.integers(1, 5),
    now_ms=st.sampled_from([1000, 1]),
)
def test_any_stored_history_gives_a_running_attempt_of_a_list_of_workers(
    stored: dict[str, bytes | None],
    job: dict[str, bytes | None],
    worker: str,
    kept: int,
    now_ms: int,
) -> None:
    """Whatever the results hash and the job hash hold (planted, or cut off), the start is
    recorded: RUNNING, a workers list of at most ``kept`` str that ends with this worker,
    a first start, and a reply that decodes."""
    raw = get_raw_redis()
    raw.delete(RESULT, Q.job(JOB))
    for name, value in stored.items():
        if value is not None:
            raw.hset(RESULT, name, value)
    for name, value in job.items():
        if value is not None:
            raw.hset(Q.job(JOB), name, value)
    found = start(now_ms, worker, kept=kept)
    workers = json.loads(found.result.workers or "")
    assert isinstance(workers, list) and 1 <= len(workers) <= kept
    assert all(isinstance(w, str) for w in workers)
    resent = stored["att"] == str(found.attempt).encode() and stored["last"] == str(now_ms).encode()
    if not resent:
        assert workers[-1] == worker
    stored_att = job["att"] or b""
    readable_att = stored_att.isdigit() and len(stored_att) <= 15
    assert found.attempt == (int(stored_att) if readable_att else 1)  # the job's, as claimed
    started = found.result.started  # a time a datetime holds
    assert started is not None
    assert started.isdigit() and int(started) <= MAX_TIME_MS
    # max attempts as fail.lua reads them: None for none stored, 0 for one it cannot read
    readable = {None: None, b"1": 1, b"1000": 1000, b"1e3": 1000}
    assert found.max_attempts == readable.get(job["max"], 0)
    assert raw.hget(RESULT, TaskResultField.STATUS) == b"RUNNING"
    assert not raw.hexists(RESULT, TaskResultField.FINISHED)


def test_given_a_token_it_writes_only_for_that_dispatch_once_begun(r: redis.Redis) -> None:
    """Sent right after the begin, in its round trip: a dispatch the begin did not let run
    (another dispatch's token, or not begun) gets no start."""

    def start_of(token: str) -> TaskStarted | None:
        return run_direct(
            task_started(
                Q, JOB, now_ms=5, worker="w", ttl_seconds=60, kept=3, task="t", args="[]",
                kwargs="{}", backend="default", priority="0", status="RUNNING", token=token,
            )
        )  # fmt: skip

    r.hset(Q.job(JOB), mapping={JobField.ATTEMPTS: "1", JobField.TOKEN: "t2"})
    assert start_of("t2") is None  # dispatched, not begun
    r.hset(Q.job(JOB), JobField.BEGAN, "t1")
    assert start_of("t2") is None  # an earlier dispatch began
    r.hset(Q.job(JOB), JobField.BEGAN, "t2")
    assert start_of("t1") is None  # a later dispatch is current
    assert not r.exists(RESULT)
    found = start_of("t2")
    assert found is not None and found.attempt == 1
    assert r.hget(RESULT, TaskResultField.STATUS) == "RUNNING"


def test_the_outcome_is_written_with_its_ttl_and_a_key_of_another_type_left_alone(
    r: redis.Redis,
) -> None:
    r.hset(RESULT, mapping={TaskResultField.STATUS: "RUNNING", TaskResultField.STARTED: "1"})
    call = task_finished(
        Q, JOB, 30, status="SUCCESSFUL", finished_ms=9, workers='["w"]', errors="[]",
        returned="5",
    )  # fmt: skip
    assert run_direct(call) is True
    stored = r.hgetall(RESULT)
    assert stored[TaskResultField.STATUS] == "SUCCESSFUL" and stored[TaskResultField.RETURN] == "5"
    assert stored[TaskResultField.STARTED] == "1"  # a start not given is left as it is
    assert 0 < r.ttl(RESULT) <= 30
    r.delete(RESULT)
    r.set(RESULT, "someone else's")
    with pytest.raises(DelayQueueError, match="WRONGTYPE"):
        run_direct(call)
    assert r.get(RESULT) == "someone else's"
