"""The records the engine hands out (``record.StoredJob``, ``schedule_record.ScheduleRecord``,
``roster.WorkerRecord``, ``task_results.StoredTaskResult``): each is decoded once, in the
engine, from whatever Redis holds; a field that is not what it should be reads as None (or
0 for a count), never as an exception in the page, command or planner that reads it."""

from __future__ import annotations

import redis

from delayqueue.engine import record, roster, schedules, task_results
from delayqueue.engine.clients import get_raw_redis
from delayqueue.engine.keys import (
    JobField,
    ScheduleField,
    TaskResultField,
    WorkerField,
    global_keys,
    queue_keys,
)
from delayqueue.engine.packing import pack
from tests.support.corrupt import NOT_UTF8

Q = "records"
KEYS = queue_keys(Q)
JOB = "01JAAAAAAAAAAAAAAAAAAAAAAA"
OTHER = "01JBBBBBBBBBBBBBBBBBBBBBBB"


def test_a_job_record_reads_its_hash_and_its_numbers_that_are_none_as_none(
    r: redis.Redis,
) -> None:
    get_raw_redis().hset(
        KEYS.job(JOB),
        mapping={JobField.TASK: NOT_UTF8, JobField.ARGS: "[1]", JobField.ATTEMPTS: "abc",
                 JobField.MAX_ATTEMPTS: "1e400", JobField.VISIBILITY_MS: "30000",
                 JobField.REASON: "gone"},
    )  # fmt: skip
    r.zadd(KEYS.dead, {JOB: 5})
    found = record.stored_job(KEYS, JOB, [])
    job = found.job
    assert job.task == NOT_UTF8.decode("utf-8", "backslashreplace")
    assert job.args == "[1]" and job.kwargs is None and job.key is None
    assert job.attempts is None and job.max_attempts is None and job.visibility_ms == 30_000
    assert job.reason == "gone" and job.found and job.problem is None
    assert found.state == "dead" and found.scores["dead"] == 5


def test_a_job_never_claimed_reads_from_its_packed_spec_and_a_bad_spec_is_its_problem(
    r: redis.Redis,
) -> None:
    r.hset(KEYS.spec_bucket(JOB), JOB, pack("t.task", "[2]", "", "3", "", "k"))
    r.hset(KEYS.spec_bucket(OTHER), OTHER, "no spec at all")
    [job, other] = record.jobs_of(KEYS, [JOB.encode(), OTHER.encode()], [])
    assert (job.task, job.args, job.key, job.max_attempts) == ("t.task", "[2]", "k", 3)
    assert other.task is None  # a list row shows it as data that is missing
    bad = record.stored_job(KEYS, OTHER, []).job
    assert bad.args_or_raw == "no spec at all" and bad.problem is not None


def test_a_schedule_record_keeps_what_it_cannot_judge_as_text_and_bad_counts_as_0(
    r: redis.Redis,
) -> None:
    r.zadd(KEYS.schedules, {"tick": float("-inf"), "gone": 1})
    r.hset(KEYS.schedule("tick"), mapping={ScheduleField.EVERY_MS: "soon",
                                            ScheduleField.FIRED: "many",
                                            ScheduleField.MISSED_COUNT: "7",
                                            ScheduleField.LAST: "x",
                                            ScheduleField.PAUSED: "1"})  # fmt: skip
    r.set(KEYS.schedule("gone"), "not a hash")
    r.zadd(KEYS.schedules, {"late": 2})
    r.hset(KEYS.schedule("late"), mapping={ScheduleField.LAST_JOB: "../etc",
                                            ScheduleField.LAST: "12"})  # fmt: skip
    [late] = schedules.stored(Q, "late")
    assert late.last_ms == 12 and late.last_job_id is None
    assert late.problems() == ["its last job '../etc' is not a job id"]
    by_name = {found.name: found for found in schedules.stored(Q)}
    tick, gone = by_name["tick"], by_name["gone"]
    assert tick.name == "tick" and tick.next_ms is None and tick.paused and tick.found
    assert tick.every_ms == "soon" and tick.last == "x" and tick.cron is None
    assert tick.fired == 0 and tick.missed_count == 7
    assert tick.last_ms is None and tick.problems() == ["its last run 'x' is not an instant"]
    assert gone.problems() == []  # its score, 1 ms, is an instant
    assert gone.name == "gone" and not gone.found and gone.task is None


def test_a_worker_record_reads_a_beat_that_is_no_number_as_none(r: redis.Redis) -> None:
    g = global_keys()
    r.zadd(g.workers, {"w1": 1_000, "w2": 2_000})
    get_raw_redis().hset(g.worker("w1"), mapping={WorkerField.HOST: NOT_UTF8,
                                                  WorkerField.BEAT: "later",
                                                  WorkerField.DISPATCHED: "12",
                                                  WorkerField.QUEUES: "a,b"})  # fmt: skip
    w2, w1 = roster.worker_entries(10)
    assert w2.id == "w2" and w2.gone  # its hash expired
    assert w1.host == NOT_UTF8.decode("utf-8", "backslashreplace") and w1.beat_ms is None
    assert w1.dispatched == 12 and w1.queues == "a,b" and w1.listed_ms == 1_000


def test_a_task_result_says_whether_its_status_is_the_current_attempts(r: redis.Redis) -> None:
    r.hset(KEYS.job(JOB), mapping={JobField.TASK: "t", JobField.ARGS: "[]",
                                   JobField.ATTEMPTS: "2"})  # fmt: skip
    r.zadd(KEYS.inflight, {JOB: 10})
    r.hset(KEYS.task_result(JOB), mapping={TaskResultField.STATUS: "RUNNING",
                                           TaskResultField.ATTEMPT: "2",
                                           TaskResultField.WORKERS: NOT_UTF8})  # fmt: skip
    found = task_results.stored_task_result([Q], JOB)
    assert found is not None and found.state == "inflight" and found.status_is_current
    assert found.job.task == "t" and found.result.status == "RUNNING"
    assert found.result.workers == NOT_UTF8.decode("utf-8", "backslashreplace")
    r.hset(KEYS.task_result(JOB), TaskResultField.ATTEMPT, "1")
    again = task_results.stored_task_result([Q], JOB)
    assert again is not None and not again.status_is_current
