"""Fuzzing what Redis holds: every field of every structure delayqueue keeps, corrupted.

Jobs in every state are written through the API, then Hypothesis picks fields and
structures to corrupt (missing, wrong Redis type, non-numeric, nan/inf, huge, non-UTF-8, a
planted pickle, empty, extreme scores, junk zset members). Then worker passes, the Celery
side (begin/ack/fail through ``delayqueue.celery.run_job``) and every admin page run. The
properties: the worker's pass never raises, the Celery side raises nothing but the task's
own exception, no admin page answers 500, and every planted job is accounted for: in
exactly one of scheduled / in flight / dead, or it ran.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from celery import Celery
from django.test import Client
from django.urls import reverse
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import delayqueue
from delayqueue.engine.keys import current_minute, global_keys, new_job_id, queue_keys
from delayqueue.runner.job import run_job
from delayqueue.wire import RUN_BATCH, valid_dispatch
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.celery_apps import celery_app_on
from tests.support.corrupt import (
    NOT_UTF8,
    PICKLE,
    SCORES,
    VALUES,
    YEAR_0_MS,
    decode_message,
    page_url,
    raw_redis,
    run_like_celery,
    states_of,
    take_messages,
)
from tests.support.fuzzing import SUPPRESS, examples
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db]

Q = "tests"
OTHER = "other"

JOB_FIELDS = ["task", "args", "kwargs", "max", "vt", "key", "tok", "att", "rp", "began", "hist",
              "err", "tb", "why", "raw"]  # fmt: skip
SPEC_FIELDS = ["task", "args", "kwargs", "max", "vt", "key"]  # delayqueue/engine/packing.py
JUNK_MEMBERS = [b"a/b", b"", b" ", b"..", b".", NOT_UTF8, b"x" * 1000, b"<b>", b"%2F", b"\n",
                b"01HZZZZZZZZZZZZZZZZZZZZZZZ", b"01hzzzzzzzzzzzzzzzzzzzzzzz"]  # fmt: skip
WRONG_TYPES = ["string", "list", "set", "zset", "hash"]
# Scheduled members with a job's data that are no job id (or whose token is at its limit):
# the Celery side refuses every dispatch of them, so they must never be sent.
NOT_IDS = [b"frac", b"01HZZZZZZZZZZZZZZZZZZZZZZ", b"01hzzzzzzzzzzzzzzzzzzzzzzz", b"I1",
           b"01HZZZZZZZZZZZZZZZZZZZZZZZZ"]  # fmt: skip
STATES = ["scheduled", "inflight", "dead"]
BASE_TAGS = ["future", "due", "inflight", "retry", "dead", "began", "expired"]


# ---- the jobs to corrupt ----------------------------------------------------------------


@dataclass
class Planted:
    """The jobs written before the corruption: tag -> (queue, id)."""

    jobs: dict[str, tuple[str, str]] = field(default_factory=dict)
    spec_only: set[str] = field(default_factory=set)  # tags of never-claimed jobs

    def id(self, tag: str) -> str:
        return self.jobs[tag][1]


class Interrupted(BaseException):
    """Stops a task mid-run without an outcome (as a killed Celery worker would)."""


def _raises(*args: Any, **kwargs: Any) -> None:
    raise ValueError("planted failure")


def _interrupted(*args: Any, **kwargs: Any) -> None:
    raise Interrupted()


def plant(parked: Celery) -> Planted:
    """Jobs of ``tests.support.jobs.record`` in every state on queue Q, two on OTHER."""
    planted = Planted()
    now = {
        tag: delayqueue.enqueue(jobs.record, [tag], delay=0, queue=Q, key=f"key-{tag}",
                                max_attempts=1 if tag == "dead" else 3, on_commit=False)
        for tag in ("inflight", "retry", "dead", "began", "expired")
    }  # fmt: skip
    other = delayqueue.enqueue(jobs.record, ["other-inflight"], delay=0, queue=OTHER,
                               on_commit=False)  # fmt: skip
    planting = DelayWorker([Q, OTHER], celery_app=parked)
    planting.run_pass()
    planting.close()
    dispatches = {decode_message(p).dispatch[1]: decode_message(p) for p in take_messages()}
    for tag, job in now.items():
        planted.jobs[tag] = (Q, job.id)
        message = dispatches[job.id]
        if tag in ("retry", "dead"):
            with pytest.raises(ValueError):
                run_job(_raises, [], {}, message.dispatch, backoff=0)
        elif tag == "began":
            with pytest.raises(Interrupted):
                run_job(_interrupted, [], {}, message.dispatch, backoff=0)
    planted.jobs["other-inflight"] = (OTHER, other.id)
    r = raw_redis()
    r.zadd(queue_keys(Q).inflight, {now["expired"].id: 0}, xx=True)  # deadline long passed
    for tag, seconds in (("future", 600), ("due", 0)):
        job = jobs.record.delay_for(tag, seconds=seconds, key=f"key-{tag}", on_commit=False)
        planted.jobs[tag] = (Q, job.id)
        planted.spec_only.add(tag)
    job = delayqueue.enqueue(jobs.record, ["other-due"], delay=0, queue=OTHER, on_commit=False)
    planted.jobs["other-due"] = (OTHER, job.id)
    planted.spec_only.add("other-due")
    r.close()
    return planted


# ---- corruptions ------------------------------------------------------------------------


def set_wrong_type(r: redis.Redis, key: str | bytes, kind: str) -> None:
    r.delete(key)
    if kind == "string":
        r.set(key, PICKLE)
    elif kind == "list":
        r.rpush(key, b"a list", NOT_UTF8)
    elif kind == "set":
        r.sadd(key, b"a set", NOT_UTF8)
    elif kind == "zset":
        r.zadd(key, {b"a zset": 1, NOT_UTF8: 2})
    else:
        r.hset(key, mapping={b"a": b"hash", NOT_UTF8: NOT_UTF8})


def job_state(r: redis.Redis, queue: str, job_id: str) -> str | None:
    found = states_of(r, queue_keys(queue).base, job_id.encode())
    return found[0] if found else None


def corrupt_field(
    r: redis.Redis, planted: Planted, tag: str, name: str, value: bytes | None
) -> None:
    queue, job_id = planted.jobs[tag]
    keys = queue_keys(queue)
    if r.type(keys.job(job_id)) not in (b"hash", b"none"):
        return  # an earlier corruption made the job key another type: that one stands
    spec: Any = r.hget(keys.spec_bucket(job_id), job_id)
    if spec is not None and name in SPEC_FIELDS:
        parts = spec.split(b"\n", len(SPEC_FIELDS) - 1)
        if len(parts) != len(SPEC_FIELDS):
            return  # an earlier corruption made the spec malformed: that one stands
        parts[SPEC_FIELDS.index(name)] = value if value is not None else b""
        r.hset(keys.spec_bucket(job_id), job_id, b"\n".join(parts))
    elif value is None:
        r.hdel(keys.job(job_id), name)
    else:
        r.hset(keys.job(job_id), name, value)


CORRUPTIONS = st.one_of(
    st.tuples(
        st.just("field"),
        st.sampled_from(BASE_TAGS),
        st.sampled_from(JOB_FIELDS),
        st.sampled_from(VALUES),
    ),  # fmt: skip
    st.tuples(
        st.just("spec"), st.sampled_from(["future", "due", "other-due"]), st.sampled_from(VALUES)
    ),  # fmt: skip
    st.tuples(
        st.just("bucket"),  # the specs bucket of a job (one holding its spec, or not)
        st.sampled_from(["future", "due", "other-due", "retry"]),
        st.sampled_from(WRONG_TYPES[:4]),
    ),  # fmt: skip
    st.tuples(
        st.just("jobkey"),
        st.sampled_from(BASE_TAGS),
        st.sampled_from(["missing", *WRONG_TYPES[:4]]),
    ),  # fmt: skip
    st.tuples(st.just("score"), st.sampled_from(BASE_TAGS), st.sampled_from(SCORES)),
    st.tuples(
        st.just("member"),
        st.sampled_from(STATES),
        st.sampled_from(JUNK_MEMBERS),
        st.sampled_from(SCORES),
    ),  # fmt: skip
    st.tuples(
        st.just("dedupe"),
        st.sampled_from([b"key-due", b"key-inflight", b"", NOT_UTF8]),
        st.sampled_from([b"", NOT_UTF8, b"a/b", b"01HZZZZZZZZZZZZZZZZZZZZZZZ"]),
    ),  # fmt: skip
    st.tuples(
        st.just("structure"),
        st.sampled_from(
            [
                f"{OTHER}:scheduled",
                f"{OTHER}:inflight",
                f"{OTHER}:dead",
                f"{OTHER}:keys",
                f"{Q}:keys",
                f"{Q}:paused",
                f"{Q}:stats",
                f"{OTHER}:stats",
                "queues",
                "workers",
                "celery",  # the Celery sides' announcements
                "fallbacks",  # the tasks' hand-off fallbacks
            ]
        ),
        st.sampled_from(WRONG_TYPES),
    ),  # fmt: skip
    st.tuples(
        st.just("stats"),
        st.sampled_from([b"dispatched", b"acked", b"failed", b"dead"]),
        st.sampled_from([b"x", b"nan", b"9" * 400, NOT_UTF8, b"-1e300"]),
    ),  # fmt: skip
    st.tuples(
        st.just("queues"),
        st.sampled_from(
            [NOT_UTF8, b"", b"a/b", b"{x}", b".", b"..", f"{Q}~0".encode(), f"{OTHER}~3".encode()]
        ),
    ),  # fmt: skip
    st.tuples(st.just("not-an-id"), st.sampled_from(NOT_IDS), st.sampled_from(["due", "tok"])),
    st.tuples(
        st.just("worker"),
        st.sampled_from([b"w1", NOT_UTF8, b""]),
        st.sampled_from(SCORES),
        st.sampled_from(VALUES),
    ),  # fmt: skip
)


def apply(r: redis.Redis, planted: Planted, corruption: tuple[Any, ...]) -> None:
    """Plant one corruption; one that meets a key an earlier corruption gave another type
    is left out (that earlier one stands)."""
    try:
        _apply(r, planted, corruption)
    except redis.ResponseError as exc:
        if not str(exc).startswith("WRONGTYPE"):
            raise


def _apply(r: redis.Redis, planted: Planted, corruption: tuple[Any, ...]) -> None:
    kind = corruption[0]
    keys = queue_keys(Q)
    if kind == "field":
        _, tag, name, value = corruption
        corrupt_field(r, planted, tag, name, value)
    elif kind == "spec":
        _, tag, value = corruption
        queue, job_id = planted.jobs[tag]
        bucket = queue_keys(queue).spec_bucket(job_id)
        if value is None:
            r.hdel(bucket, job_id)
        else:
            r.hset(bucket, job_id, value)
    elif kind == "bucket":
        _, tag, how = corruption
        queue, job_id = planted.jobs[tag]
        set_wrong_type(r, queue_keys(queue).spec_bucket(job_id), how)
    elif kind == "jobkey":
        _, tag, how = corruption
        queue, job_id = planted.jobs[tag]
        job_key = queue_keys(queue).job(job_id)
        if how == "missing":
            r.delete(job_key)
            r.hdel(queue_keys(queue).spec_bucket(job_id), job_id)
        else:
            set_wrong_type(r, job_key, how)
    elif kind == "score":
        _, tag, score = corruption
        queue, job_id = planted.jobs[tag]
        state = job_state(r, queue, job_id)
        if state is not None:
            r.zadd(getattr(queue_keys(queue), state), {job_id: score})
    elif kind == "member":
        _, state, member, score = corruption
        r.zadd(getattr(keys, state), {member: score})
    elif kind == "dedupe":
        _, key, value = corruption
        r.hset(keys.dedupe, key, value)
    elif kind == "structure":
        _, name, how = corruption
        if name in ("queues", "workers", "celery", "fallbacks"):
            attribute = {"celery": "celery_sides"}.get(name, name)
            set_wrong_type(r, getattr(global_keys(), attribute), how)
        else:
            queue, _, part = name.partition(":")
            base = queue_keys(queue)
            key = base.stats(current_minute()) if part == "stats" else f"{base.base}:{part}"
            set_wrong_type(r, key, how)
    elif kind == "stats":
        _, name, value = corruption
        r.hset(keys.stats(current_minute()), name, value)
    elif kind == "queues":
        r.sadd(global_keys().queues, corruption[1])
    elif kind == "not-an-id":
        _, member, what = corruption
        planted_id: bytes = member if what == "due" else new_job_id().encode()
        planted_key = keys.job_prefix.encode() + planted_id
        r.hset(
            planted_key,
            mapping={"task": "tests.support.jobs.record", "args": b'["x"]', "max": b"3"},
        )
        if what == "tok":  # its next token would have 16 digits
            r.hset(planted_key, "tok", b"9" * 15)
        r.zadd(keys.scheduled, {planted_id: 0})
    elif kind == "worker":
        _, worker, score, value = corruption
        r.zadd(global_keys().workers, {worker: score})
        worker_key = global_keys().worker("").encode() + worker
        r.delete(worker_key)
        if value is not None:
            r.hset(worker_key, mapping={"host": value, "beat": value, "pid": value,
                                        "queues": value})  # fmt: skip


# ---- running everything -----------------------------------------------------------------


def url(name: str, *args: str) -> str:
    return reverse(f"admin:delayqueue_delayedjob_{name}", args=args)


def admin_pages(r: redis.Redis, planted: Planted) -> list[str]:
    pages = [url("changelist"), url("changelist") + f"?chart={Q}",
             url("changelist") + f"?chart={OTHER}"]  # fmt: skip
    for queue in (Q, OTHER):
        for state in STATES:
            base = page_url(url, "list", queue, state)
            pages += [
                base,
                base + "?order=desc",
                base + "?page=2",
                base + "?task=tests.support.jobs.record",
            ]
            pages += [base + "?q=key-due", base + "?q=record", base + "?q=%FF"]
            pages += [base + f"?q={job_id}" for q, job_id in planted.jobs.values() if q == queue]
    job_ids: list[str | bytes] = [job_id for _, job_id in planted.jobs.values()]
    for state in STATES:
        try:
            stored: Any = r.zrange(getattr(queue_keys(Q), state), 0, -1)
            job_ids += list(stored)
        except redis.ResponseError:
            pass
    for job_id in dict.fromkeys(job_ids):
        pages.append(page_url(url, "job", Q, job_id))
    pages += [page_url(url, "job", OTHER, job_id) for q, job_id in planted.jobs.values()
              if q == OTHER]  # fmt: skip
    return pages


def render_every_page(client: Client, pages: list[str], problems: list[str]) -> None:
    for page in pages:
        try:
            response = client.get(page)
        except Exception as exc:
            problems.append(f"GET {page[:100]} raised {type(exc).__name__}: {exc}"[:300])
            continue
        if response.status_code >= 500:
            problems.append(f"GET {page[:100]} answered {response.status_code}")
    try:
        response = client.post(url("act", Q), {"action": "retry_all", "confirmed": "yes"})
    except Exception as exc:
        problems.append(f"POST retry_all raised {type(exc).__name__}: {exc}"[:300])
    else:
        if response.status_code >= 500:
            problems.append(f"POST retry_all answered {response.status_code}")


def passes_and_celery(parked: Celery, problems: list[str], rounds: int = 3) -> None:
    """Worker passes (reap, claim, dispatch), each followed by the Celery side running
    whatever was dispatched."""
    worker = DelayWorker([Q, OTHER], celery_app=parked)
    for _ in range(rounds):
        try:
            worker.run_pass()
        except BaseException as exc:
            problems.append(f"run_pass raised {type(exc).__name__}: {exc}"[:400])
        for payload in take_messages():
            try:
                message = decode_message(payload)
            except Exception as exc:
                problems.append(f"a dispatched message cannot be decoded: {exc!r}"[:300])
                continue
            for dispatch in _dispatches(message):
                if not valid_dispatch(*dispatch):
                    problems.append(f"sent a dispatch the Celery side refuses: {dispatch}")
            try:
                run_like_celery(message, parked.tasks)
            except BaseException as exc:
                problems.append(
                    f"the Celery side of {message.task} raised {type(exc).__name__}: {exc}"[:400]
                )
    worker.close()


def _dispatches(message: Any) -> list[tuple[str, str, str]]:
    """(queue, id, token) of each job a message carries: its headers', or a batch's entries."""
    if "dq_id" in message.headers:
        return [message.dispatch]
    if message.task == RUN_BATCH and len(message.args) == 3:
        queue, _, entries = message.args
        return [(str(queue), str(entry[0]), str(entry[1])) for entry in entries]
    return []


def odd_dispatches(planted: Planted, token: str, parked: Celery, problems: list[str]) -> None:
    """Dispatches no delay worker made (stale, foreign or junk tokens) change nothing and
    raise nothing."""
    for tag, (queue, job_id) in planted.jobs.items():
        try:
            run_job(jobs.record.run, [tag], {}, (queue, job_id, token))
        except BaseException as exc:
            problems.append(
                f"run_job with token {token!r} raised {type(exc).__name__}: {exc}"[:300]
            )
            return


def unaccounted(r: redis.Redis, planted: Planted, corruptions: list[tuple[Any, ...]]) -> list[str]:
    """Planted jobs that are in no state (or in several) and did not run."""
    broken = {c[1].partition(":")[0] for c in corruptions if c[0] == "structure"} - {"queues"}
    ran = {str(run["tag"]) for run in jobs.ran()}
    problems = []
    for tag, (queue, job_id) in planted.jobs.items():
        if queue == OTHER and OTHER in broken:
            continue  # its zsets were replaced: nothing can be said about its jobs
        found = states_of(r, queue_keys(queue).base, job_id.encode())
        if len(found) > 1:
            problems.append(f"job {tag} is in {found} at once")
        elif not found and tag not in ran:
            problems.append(f"job {tag} was lost: in no state and it did not run")
    return problems


# No shrinking: an example costs about a second, and the corruptions of a failing one are
# already few (at most four) and named in the failure. Its timeout is for a hang: on a
# loaded machine an example takes several seconds, and 150 of them outlast the default 600.
@pytest.mark.timeout(8 * examples(150))
@settings(
    max_examples=examples(150),
    suppress_health_check=SUPPRESS,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(
    corruptions=st.lists(CORRUPTIONS, min_size=1, max_size=4),
    token=st.sampled_from(["0", "", "nan", "1e300", "-1", "1" * 400, "\udcff", "x\n"]),
)
def test_whatever_redis_holds_the_worker_runs_celery_copes_no_page_fails_no_job_is_lost(
    r: redis.Redis,
    parked_celery: Celery,
    fresh: Callable[[], None],
    superuser: Client,
    corruptions: list[tuple[Any, ...]],
    token: str,
) -> None:
    fresh()
    planted = plant(parked_celery)
    raw = raw_redis()
    for corruption in corruptions:
        apply(raw, planted, corruption)
    problems: list[str] = []
    odd_dispatches(planted, token, parked_celery, problems)
    passes_and_celery(parked_celery, problems)
    render_every_page(superuser, admin_pages(raw, planted), problems)
    passes_and_celery(parked_celery, problems, rounds=1)  # what retry_all requeued
    problems += unaccounted(raw, planted, corruptions)
    for tag, (queue, job_id) in planted.jobs.items():
        keys = queue_keys(queue)
        try:
            dead = raw.zscore(keys.dead, job_id) is not None
            why = raw.hget(keys.job(job_id), "why") if dead and tag != "dead" else b"-"
        except redis.ResponseError:
            continue  # a key of the wrong type, planted
        if dead and not why:
            problems.append(f"job {tag} went to dead without a reason")
    raw.close()
    assert not problems, "\n".join(dict.fromkeys(problems))


# ---- the same with a real Celery worker -------------------------------------------------

REAL_CORRUPTIONS: list[tuple[Any, ...]] = [
    ("field", "due", "args", b"[" * 5000 + b"]" * 5000),
    ("field", "due", "kwargs", b"[1,2,3]"),
    ("field", "inflight", "vt", b"nan"),
    ("field", "retry", "max", b"inf"),
    ("field", "retry", "att", b"9" * 400),
    ("field", "expired", "rp", b"nan"),
    ("field", "expired", "hist", b"[" * 5000),
    ("field", "began", "tok", NOT_UTF8),
    ("field", "future", "args", PICKLE),
    ("score", "future", YEAR_0_MS),
    ("member", "scheduled", b"a/b", 0),
    ("member", "inflight", b"", 0),
]


@pytest.mark.timeout(120)
def test_corrupt_jobs_settle_on_a_real_celery_worker(
    r: redis.Redis, parked_celery: Celery, celery_worker: Any, superuser: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    planted = plant(parked_celery)  # planted through the parked broker, run by the real one
    # A Celery app on the broker the session's Celery worker consumes, once the parked
    # app's environment is undone.
    monkeypatch.undo()
    real_celery_app = celery_app_on(os.environ["CELERY_BROKER_URL"])
    raw = raw_redis()
    for corruption in REAL_CORRUPTIONS:
        apply(raw, planted, corruption)
    raw.zadd(queue_keys(Q).scheduled, {planted.id("future"): 0}, xx=True)  # due now
    for tag in ("inflight", "began", "other-inflight"):  # dispatched to the parked broker
        queue, job_id = planted.jobs[tag]
        raw.zadd(queue_keys(queue).inflight, {job_id: 0}, xx=True)  # so: timed out
    worker = DelayWorker([Q, OTHER], celery_app=real_celery_app, visibility_timeout=2)
    errors: list[str] = []

    def settled() -> bool:
        try:
            worker.run_pass()
        except BaseException as exc:
            errors.append(f"run_pass raised {type(exc).__name__}: {exc}"[:300])
        return not any(
            raw.zscore(queue_keys(q).inflight, job_id) is not None
            or raw.zscore(queue_keys(q).scheduled, job_id) is not None
            for q, job_id in planted.jobs.values()
        )

    try:
        wait_for(settled, timeout=60, interval=0.1)
    except AssertionError:
        pending = [
            f"{tag}: {job_state(raw, q, job_id)}"
            for tag, (q, job_id) in planted.jobs.items()
            if job_state(raw, q, job_id) in ("scheduled", "inflight")
        ]
        errors.append(f"not settled within 60 s: {pending}")
    problems = list(dict.fromkeys(errors)) + unaccounted(raw, planted, REAL_CORRUPTIONS)
    render_every_page(superuser, admin_pages(raw, planted), problems)
    raw.close()
    assert not problems, "\n".join(problems)
