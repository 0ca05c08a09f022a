"""A never-claimed job's spec in its bucket names its task, max attempts and visibility by a
code of the queue's tasks hash (lua/_spec.lua; docs/design.md, "Bytes per job"): the
scripts that move it into a job hash and the readers put them back, and a code the hash
lacks is that one job's problem."""

from __future__ import annotations

import redis

from delayqueue.django_tasks.job_args import RUN_DJANGO_TASK
from delayqueue.engine import record, transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import JobField, new_job_id, queue_keys
from delayqueue.engine.packing import pack
from tests.support import jobs
from tests.support.states import Q, claim_all, schedule, score
from tests.support.stored import stored_job

KEYS = queue_keys(Q)
TASK = "tests.support.jobs.record"


def bucket_spec(r: redis.Redis, job_id: str) -> str:
    return str(r.hget(KEYS.spec_bucket(job_id), job_id))


def test_a_bucket_spec_is_coded_and_reads_and_claims_as_the_spec_it_stands_for(
    r: redis.Redis,
) -> None:
    a = schedule("a", seconds=0, max_attempts=4, visibility_timeout=30)
    b = schedule("b", seconds=0, max_attempts=4, visibility_timeout=30, key="k:b")
    c = schedule("c", seconds=0, task=jobs.always_fails)
    coded = {job.id: bucket_spec(r, job.id) for job in (a, b, c)}
    assert all(spec.startswith("\x01") and TASK not in spec for spec in coded.values())
    assert coded[a.id].endswith('["a"]') and coded[b.id].endswith('["b"]\n\n\nk:b')
    assert coded[a.id][:-5] == coded[b.id][:-11] != coded[c.id][:-5]  # one code per task
    expected = {JobField.TASK: TASK, JobField.ARGS: '["a"]', JobField.MAX_ATTEMPTS: "4",
                JobField.VISIBILITY_MS: "30000"}  # fmt: skip
    assert stored_job(r, KEYS, a.id) == expected
    [row_a, row_b] = record.jobs_of(KEYS, [a.id.encode(), b.id.encode()], [])
    assert (row_a.task, row_a.args, row_a.max_attempts) == (TASK, '["a"]', 4)
    assert (row_b.task, row_b.key) == (TASK, "k:b")
    assert record.stored_job(KEYS, c.id, []).job.task == "tests.support.jobs.always_fails"
    assert record.read_task_name(KEYS, a.id) == TASK

    claimed = {job.id.decode(): job for job in claim_all()}
    assert {job_id: job.task.decode() for job_id, job in claimed.items()} == {
        a.id: TASK,
        b.id: TASK,
        c.id: "tests.support.jobs.always_fails",
    }
    assert claimed[b.id].args_json == b'["b"]'
    # the job hash holds the path and the options, as ever
    in_hash = r.hgetall(KEYS.job(a.id))
    assert (in_hash[JobField.TASK], in_hash[JobField.MAX_ATTEMPTS]) == (TASK, "4")
    assert in_hash[JobField.VISIBILITY_MS] == "30000"
    assert r.hget(KEYS.job(b.id), JobField.KEY) == "k:b"


def test_a_code_the_tasks_hash_lacks_is_that_jobs_problem_only(r: redis.Redis) -> None:
    lost = schedule("lost", seconds=0, task=jobs.always_fails)
    kept = schedule("kept", seconds=0)
    code = bucket_spec(r, lost.id).partition("[")[0]
    r.hdel(KEYS.tasks, code)  # (a code once given is never taken back: damage)

    notes: list[str] = []
    shown = record.stored_job(KEYS, lost.id, notes).job
    assert shown.raw == bucket_spec(r, lost.id) and "code" in (shown.problem or "")
    assert [job.task for job in record.jobs_of(KEYS, [lost.id.encode(), kept.id.encode()], [])] == [
        None, TASK
    ]  # fmt: skip
    assert record.read_task_name(KEYS, lost.id) == ""

    claimed = [job.id.decode() for job in claim_all()]
    assert claimed == [kept.id]  # the pass goes on
    assert score(r, KEYS.dead, lost.id) is not None
    dead = r.hgetall(KEYS.job(lost.id))
    assert "code" in dead[JobField.REASON] and str(dead[JobField.RAW]).startswith("\x01")


def test_bury_writes_a_coded_specs_task_back(r: redis.Redis) -> None:
    job = schedule("bury", seconds=600, key="k:bury")
    assert bucket_spec(r, job.id).startswith("\x01")
    assert run(transitions.bury(KEYS, job.id, "unknown task"))
    dead = r.hgetall(KEYS.job(job.id))
    assert (dead[JobField.TASK], dead[JobField.ARGS], dead[JobField.KEY]) == (
        TASK, '["bury"]', "k:bury"
    )  # fmt: skip
    assert not r.hexists(KEYS.dedupe, "k:bury")


def test_a_tasks_key_of_another_type_leaves_specs_uncoded(r: redis.Redis) -> None:
    r.set(KEYS.tasks, "someone else's")
    job = schedule("plain", seconds=0)
    assert bucket_spec(r, job.id).startswith(TASK + "\n")
    assert [c.task.decode() for c in claim_all()] == [TASK]


def test_a_django_tasks_jobs_keep_their_specs_uncoded(r: redis.Redis) -> None:
    """task_results.py reads a never-claimed Django task job's spec without the tasks hash."""
    django_spec = pack(RUN_DJANGO_TASK, '["app.tasks.mail", [], {}]', "", "3", "")
    mixed = [transitions.NewJob(new_job_id(), "delay", 0, "", "keep", spec, "")
             for spec in (pack(TASK, "[1]"), django_spec)]  # fmt: skip
    run(transitions.enqueue(KEYS, mixed, wake_horizon_ms=0))
    assert [bucket_spec(r, job.id) for job in mixed] == [pack(TASK, "[1]"), django_spec]
    alone = transitions.NewJob(new_job_id(), "delay", 0, "", "keep", pack(TASK, "[2]"), "")
    run(transitions.enqueue(KEYS, [alone], wake_horizon_ms=0))
    assert bucket_spec(r, alone.id).startswith("\x01")
