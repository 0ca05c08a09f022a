"""Fuzzing the public API: arbitrary values for every argument of every call.

The property: each call EITHER raises a ``DelayQueueError`` (and no other exception type)
and leaves Redis exactly as it was, OR writes jobs that, after a delay worker pass, are
dispatched to Celery (and then run, fail for retry, or die with a reason on the Celery side)
or are in dead with a reason. Nothing the API accepts may stop the worker or be lost.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Callable
from typing import Any

import pytest
import redis
from celery import Celery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kombu.utils.json import loads as kombu_loads

import delayqueue
from delayqueue.engine import clients as connection
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import DelayQueueError
from delayqueue.producer.api import Job, JobSpec
from delayqueue.wire import encode_args
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.api_calls import Prior, api_calls, make_prior
from tests.support.api_options import MAX_ATTEMPTS, QUEUES, VISIBILITY
from tests.support.api_values import ARGS, KWARGS, build, deep_dict, deep_list
from tests.support.celery_apps import celery_app_on
from tests.support.corrupt import (
    decode_message,
    parked_broker,
    raw_redis,
    run_like_celery,
    snapshot,
    snapshot_diff,
    take_messages,
)
from tests.support.fuzzing import examples
from tests.support.waiting import wait_for

pytestmark = pytest.mark.fuzz

SUPPRESS = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.function_scoped_fixture,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
]


# ---- what a written job must become -----------------------------------------------------


def redis_now_ms(r: redis.Redis) -> int:
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def accepted_jobs(result: Any) -> list[Job]:
    if isinstance(result, Job):
        return [result]
    if isinstance(result, list):
        return [job for job in result if isinstance(job, Job)]
    return []


def check_runs(r: redis.Redis, written: list[Job], parked: Celery, call: str) -> None:
    """The written jobs, made due now, go through a worker pass and the Celery side: each
    ends dispatched and then run / retried / dead, or dead with a reason at the pass."""
    # A dedupe key that kept a job already in flight: its dispatch is out there already.
    written = [job for job in written if not (job.outcome == "kept" and job.state == "inflight")]
    if not written:
        return
    queues = sorted({job.queue for job in written})
    now = redis_now_ms(r)
    for job in written:
        keys = queue_keys(job.queue)
        states = [s for s in ("scheduled", "inflight") if r.zscore(getattr(keys, s), job.id)]
        assert states, f"{call}: returned job {job.id} ({job.outcome}) is in no queue state"
        score = r.zscore(keys.scheduled, job.id)
        if score is not None and score > now:
            r.zadd(keys.scheduled, {job.id: now}, xx=True)  # time passes
    worker = DelayWorker(queues, celery_app=parked)
    try:
        for _ in range(3):
            try:
                result = worker.run_pass()
            except BaseException as exc:
                raise AssertionError(f"{call}: the worker pass raised {exc!r}") from exc
            if not result.claimed:
                break
    finally:
        worker.close()  # its connections, not left to the garbage collector
    dispatched: set[str] = set()
    for payload in take_messages():
        try:
            message = decode_message(payload)
        except BaseException as exc:
            raise AssertionError(
                f"{call}: a dispatched message cannot be decoded as Celery would ({exc!r})"
            ) from exc
        dispatched.add(message.dispatch[1])
        try:
            outcome = run_like_celery(message, parked.tasks)
        except BaseException as exc:
            raise AssertionError(f"{call}: the Celery side raised {exc!r}") from exc
        assert outcome != "stale", f"{call}: a fresh dispatch of {message.dispatch} was stale"
    for job in written:
        keys = queue_keys(job.queue)
        dead = r.zscore(keys.dead, job.id) is not None
        if dead:
            why = r.hget(keys.job(job.id), "why")
            assert why, f"{call}: job {job.id} is dead without a reason"
            continue
        assert job.id in dispatched, f"{call}: job {job.id} was neither dispatched nor buried"
        assert r.zscore(keys.inflight, job.id) is None, (
            f"{call}: job {job.id} is still in flight after the Celery side ran it"
        )


def check_cancelled(r: redis.Redis, prior: Prior | None, call: str) -> None:
    assert prior is not None, f"{call}: cancelled a job though none existed"
    keys = queue_keys(prior.job.queue)
    job_id = prior.job.id
    for state in ("scheduled", "inflight", "dead"):
        assert r.zscore(getattr(keys, state), job_id) is None, f"{call}: still {state}"
    assert not r.exists(keys.job(job_id)), f"{call}: the cancelled job's hash stayed"
    assert r.hget(keys.spec_bucket(job_id), job_id) is None, (
        f"{call}: the cancelled job's spec stayed"
    )
    if prior.key is not None:
        assert r.hget(keys.dedupe, prior.key) != job_id, f"{call}: its dedupe key stayed"


def check_rescheduled(r: redis.Redis, job: Job, call: str) -> None:
    keys = queue_keys(job.queue)
    score = r.zscore(keys.scheduled, job.id)
    assert score is not None, f"{call}: the rescheduled job is not scheduled"
    assert job.due_at is not None
    assert abs(score - job.due_at.timestamp() * 1000) < 1.5, (
        f"{call}: due_at {job.due_at} is not the stored due time {score}"
    )


# ---- the properties ---------------------------------------------------------------------


@pytest.fixture
def fresh(r: redis.Redis, parked_celery: Celery) -> Callable[[], None]:
    def reset() -> None:
        r.flushdb()
        connection.reset()  # forgets which queues it already added to dq:queues
        parked_broker().delete("celery")

    return reset


@settings(max_examples=examples(800), suppress_health_check=SUPPRESS)
@given(data=st.data())
def test_every_api_call_raises_a_documented_error_and_writes_nothing_or_its_job_runs(
    r: redis.Redis, parked_celery: Celery, fresh: Callable[[], None], data: st.DataObject
) -> None:
    fresh()
    prior_state = data.draw(st.sampled_from([None, None, "scheduled", "inflight"]), "prior")
    prior_key = data.draw(st.sampled_from([None, "k", " k ", "k\n"]), "prior key")
    prior = make_prior(prior_state, prior_key, parked_celery)
    call, thunk = data.draw(api_calls(prior), "call")
    raw = raw_redis()
    before = snapshot(raw)
    try:
        result = thunk()
    except DelayQueueError:
        changes = snapshot_diff(before, snapshot(raw))
        assert not changes, f"{call} raised a DelayQueueError but changed Redis: {changes}"
        return
    except BaseException as exc:
        raise AssertionError(f"{call} raised {type(exc).__name__}, not a DelayQueueError") from exc
    finally:
        raw.close()
    after = snapshot(raw_redis())
    if call.startswith("spec("):
        assert isinstance(result, JobSpec), call
        assert not snapshot_diff(before, after), f"{call}: spec() wrote to Redis"
        return
    if call.startswith(("cancel(", "record.cancel(")):
        if result:
            check_cancelled(r, prior, call)
        else:
            assert not snapshot_diff(before, after), f"{call} cancelled nothing but wrote"
        return
    if call.startswith(("reschedule(", "record.reschedule(")):
        if result is None:
            assert not snapshot_diff(before, after), f"{call} moved nothing but wrote"
            return
        check_rescheduled(r, result, call)
        check_runs(r, [result], parked_celery, call)
        return
    written = accepted_jobs(result)
    if not written:
        assert not snapshot_diff(before, after), f"{call} returned no job but wrote"
        return
    check_runs(r, written, parked_celery, call)


_ODD_TASKS = itertools.count()


@settings(max_examples=examples(150), suppress_health_check=SUPPRESS)
@given(
    queue=QUEUES,
    max_attempts=MAX_ATTEMPTS,
    visibility=VISIBILITY,
    backoff=st.sampled_from(
        [None, 0, 0.01, -1, math.nan, math.inf, "1", True, 1e300, lambda attempt: -5.0]
    ),
    args=ARGS,
)
def test_delayed_task_options_are_checked_once_at_decoration(
    r: redis.Redis,
    parked_celery: Celery,
    fresh: Callable[[], None],
    queue: Any,
    max_attempts: Any,
    visibility: Any,
    backoff: Any,
    args: list[Any],
) -> None:
    """Options @delayed_task accepts must not make the task's calls fail: either the
    decoration raises a DelayQueueError, or the task schedules jobs that run."""
    fresh()
    options = {
        "queue": queue,
        "max_attempts": max_attempts,
        "visibility_timeout": visibility,
        "backoff": backoff,
    }
    shown = f"delayed_task(**{options!r})"
    name = f"tests.fuzz.odd.{next(_ODD_TASKS)}"  # a new task each time: Celery keeps names
    options = {k: build(v) for k, v in options.items()}

    def odd(*a: Any, **k: Any) -> None:
        jobs._report("odd", repr(a)[:50])
        raise ValueError("odd tasks fail, to exercise the backoff")

    # @delayed_task resolves through Celery's current app, which the parked app became when
    # it was made: the project's app again, as in a real process (and the parked one too).
    jobs.record.app.set_current()
    try:
        task = delayqueue.delayed_task(name=name, **options)(odd)
    except DelayQueueError:
        return
    except BaseException as exc:
        raise AssertionError(f"{shown} raised {type(exc).__name__}: {exc}") from exc
    registered: Any = jobs.record.app.tasks[name]  # the task, not shared_task's proxy
    task = registered
    parked_celery.tasks[name] = task
    try:
        job = task.delay_for("x", seconds=0, on_commit=False)
    except BaseException as exc:
        raise AssertionError(
            f"{shown} was accepted, then task.delay_for('x', seconds=0) raised {exc!r}"
        ) from exc
    check_runs(r, [job], parked_celery, f"{shown}; task.delay_for('x', seconds=0)")
    try:
        args_built = build(args)
        more = task.delay_many([args_built], seconds=0, on_commit=False)
    except DelayQueueError:
        return
    except BaseException as exc:
        raise AssertionError(f"{shown}; task.delay_many([{args!r}]) raised {exc!r}") from exc
    check_runs(r, more, parked_celery, f"{shown}; task.delay_many([{args!r}], seconds=0)")


# ---- end to end, with a real Celery worker ----------------------------------------------


def accepted_depth_limit() -> int:
    """The deepest list nesting spec() accepts (found by bisection; spec() writes nothing)."""
    low, high = 1, 20_000
    while low < high:
        middle = (low + high + 1) // 2
        try:
            delayqueue.spec(jobs.record, [deep_list(middle)], delay=0)
        except DelayQueueError:
            high = middle - 1
        else:
            low = middle
    return low


ODD_BUT_VALID = [
    "k\u2028\u2029",
    "\x00\n\r\t",
    "😀" * 100,
    "\U0010ffff\ufeff",
    "é" * 1000,
    "</script><b>",
    {"\x00": ["\n", None, -0.0, 1e308, 2**63, -(2**63)]},
    [[], {}, "", 0, False],
]


@pytest.mark.timeout(120)
def test_odd_but_accepted_jobs_run_or_die_with_a_reason_on_a_real_celery_worker(
    r: redis.Redis, celery_worker: Any
) -> None:
    depth = accepted_depth_limit()
    calls: list[tuple[str, Callable[[], Job]]] = [
        (
            f"nesting {depth}",
            lambda: jobs.record.delay_for(deep_list(depth), seconds=0, on_commit=False),
        ),  # fmt: skip
        (
            f"dict nesting {depth}",
            lambda: delayqueue.enqueue(jobs.record, [deep_dict(depth)], delay=0, on_commit=False),
        ),  # fmt: skip
        (
            f"plain task, nesting {depth}",
            lambda: delayqueue.enqueue(
                "tests.support.jobs.plain", [deep_list(depth)], delay=0, on_commit=False
            ),
        ),  # fmt: skip
        (
            f"kwargs nesting {depth}",
            lambda: delayqueue.enqueue(
                jobs.record, [], {"tag": deep_list(depth)}, delay=0, on_commit=False
            ),
        ),  # fmt: skip
        (
            "queue '.'",
            lambda: delayqueue.enqueue(jobs.record, ["dot"], delay=0, queue=".", on_commit=False),
        ),  # fmt: skip
        (
            "queue '..'",
            lambda: delayqueue.enqueue(
                jobs.record, ["dotdot"], delay=0, queue="..", on_commit=False
            ),
        ),  # fmt: skip
        (
            "key with NUL and newline",
            lambda: jobs.record.delay_for("keyed", seconds=0, key="k\x00\n\u2028", on_commit=False),
        ),  # fmt: skip
        (
            "visibility 0.0015 s",
            lambda: delayqueue.enqueue(
                jobs.record, ["short vt"], delay=0, visibility_timeout=0.0015, on_commit=False
            ),
        ),  # fmt: skip
        (
            "max_attempts 10**9",
            lambda: delayqueue.enqueue(
                jobs.record, ["many"], delay=0, max_attempts=10**9, on_commit=False
            ),
        ),  # fmt: skip
        (
            "big payload",
            lambda: jobs.record.delay_for("x" * 60_000, seconds=0, on_commit=False),
        ),  # fmt: skip
        *[
            (
                f"value {value!r}",
                lambda value=value: jobs.record.delay_for(value, seconds=0, on_commit=False),
            )  # fmt: skip
            for value in ODD_BUT_VALID
        ],
    ]
    written: dict[str, tuple[str, Job]] = {}
    refused: list[str] = []
    for what, call in calls:
        try:
            job = call()
        except DelayQueueError:
            refused.append(what)
            continue
        except BaseException as exc:
            raise AssertionError(f"{what}: raised {exc!r}") from exc
        written[job.id] = (what, job)
    assert len(written) >= len(calls) - 4, f"too much refused: {refused}"
    # A Celery app of its own on the broker the session's Celery worker consumes (earlier
    # tests left a parked app as Celery's current one).
    app = celery_app_on(os.environ["CELERY_BROKER_URL"])
    worker = DelayWorker(sorted({job.queue for _, job in written.values()}), celery_app=app)
    errors: list[str] = []

    def settled() -> bool:
        try:
            worker.run_pass()
        except BaseException as exc:
            errors.append(repr(exc))
            return True
        for _, job in written.values():
            keys = queue_keys(job.queue)
            if r.zscore(keys.dead, job.id) is not None:
                continue
            if r.exists(keys.job(job.id)) or r.hexists(keys.spec_bucket(job.id), job.id):
                return False
        return True

    try:
        wait_for(settled, timeout=60, interval=0.05)
    except AssertionError:
        pass
    assert not errors, f"the worker pass raised: {errors}"
    unsettled = []
    for what, job in written.values():
        keys = queue_keys(job.queue)
        if r.zscore(keys.dead, job.id) is not None:
            if not r.hget(keys.job(job.id), "why"):
                unsettled.append(f"{what}: dead without a reason")
            continue
        if r.exists(keys.job(job.id)) or r.hexists(keys.spec_bucket(job.id), job.id):
            states = [s for s in ("scheduled", "inflight") if r.zscore(getattr(keys, s), job.id)]
            unsettled.append(f"{what}: still {states or 'stored'} after 60 s")
    assert not unsettled, unsettled
    ran = [run["tag"] for run in jobs.ran()]
    for what, job in written.values():
        keys = queue_keys(job.queue)
        if r.zscore(keys.dead, job.id) is None:
            assert ran, f"{what}: acked but no run was recorded"


@settings(max_examples=examples(400), suppress_health_check=SUPPRESS)
@given(args=ARGS, kwargs=KWARGS)
def test_what_the_api_accepts_reaches_the_task_as_the_same_values(
    args: list[Any], kwargs: dict[str, Any]
) -> None:
    """The Celery worker decodes a message's arguments with kombu's JSON, which turns some
    dicts into other types: whatever the API accepts, kombu decodes to the very values
    plain JSON does (no b'...', no Decimal, no message it cannot decode)."""
    try:
        args_json, kwargs_json = encode_args(args, kwargs, 10**7)
    except DelayQueueError:
        return
    assert kombu_loads(args_json) == json.loads(args_json)
    if kwargs_json:
        assert kombu_loads(kwargs_json) == json.loads(kwargs_json)
