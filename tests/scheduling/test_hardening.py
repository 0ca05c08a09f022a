"""What the API accepts must never stop the worker; bad input fails at the call and leaves
Redis as it was; Redis's error replies come out as delayqueue's documented errors."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from celery import Celery
from django.conf import settings
from django.db import transaction
from django.test import override_settings
from django.utils.timezone import make_aware

import delayqueue
from delayqueue import NotSerializable
from delayqueue.engine.keys import global_keys, new_job_id, queue_keys
from delayqueue.engine.redis_errors import translate
from delayqueue.errors import (
    DelayQueueError,
    InvalidDelay,
    InvalidKey,
    InvalidOption,
    RedisError,
    RedisLoading,
    RedisMisconfigured,
    RedisOutOfMemory,
    RedisPermissionDenied,
    RedisReadOnly,
)
from delayqueue.runner.job import run_job
from delayqueue.wire import MAX_NESTING
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.corrupt import keys_of_the_test
from tests.support.redis_server import RedisServer
from tests.support.stored import stored_job

Q = queue_keys("tests")


def nested(levels: int) -> list[Any]:
    top: list[Any] = []
    cur = top
    for _ in range(levels - 1):
        cur.append([])
        cur = cur[0]
    return top


def snapshot(r: redis.Redis) -> dict[str, bytes | None]:
    return {key: r.dump(key) for key in sorted(keys_of_the_test(r))}


@pytest.fixture
def unchanged(r: redis.Redis) -> Iterator[None]:
    jobs.record.delay_for("warm", seconds=60, on_commit=False)  # the queue is known
    before = snapshot(r)
    yield
    assert snapshot(r) == before


@pytest.fixture(autouse=True)
def parked(parked_celery: Celery) -> Celery:
    return parked_celery


# ---- nesting ------------------------------------------------------------------------------


def test_nesting_limit_is_exact_and_documented(unchanged: None) -> None:
    assert nested(MAX_NESTING) and len(str(nested(MAX_NESTING))) == 2 * MAX_NESTING
    with pytest.raises(NotSerializable, match=f"more than {MAX_NESTING}"):
        jobs.record.delay_for(nested(MAX_NESTING), seconds=1, on_commit=False)


def test_nesting_limit_does_not_depend_on_the_callers_stack(r: redis.Redis) -> None:
    """Called from deep in a stack, the same arguments get the same answer."""

    def at_depth(depth: int, call: Callable[[], Any]) -> Any:
        return call() if depth == 0 else at_depth(depth - 1, call)

    depth = sys.getrecursionlimit() - 150
    accepted = at_depth(
        depth, lambda: jobs.record.delay_for(nested(MAX_NESTING - 1), seconds=1, on_commit=False)
    )
    assert r.hexists(Q.spec_bucket(accepted.id), accepted.id)
    with pytest.raises(NotSerializable):
        at_depth(depth, lambda: jobs.record.delay_for(nested(985), seconds=1, on_commit=False))


@pytest.mark.parametrize("levels", [MAX_NESTING + 1, 985, 5_000])
def test_deeply_nested_data_in_redis_goes_to_dead_and_the_worker_goes_on(
    r: redis.Redis, parked: Celery, levels: int
) -> None:
    """Written past the API (an older version, another client): the worker buries it and
    dispatches the other queues' jobs of the same pass."""
    deep = "[" * levels + "]" * levels
    deep_id = new_job_id()
    r.hset(Q.spec_bucket(deep_id), deep_id, f"tests.support.jobs.record\n[{deep}]\n\n3\n\n")
    r.zadd(Q.scheduled, {deep_id: 0})
    other = delayqueue.enqueue(jobs.record, ["other"], delay=0, queue="other", on_commit=False)
    good = jobs.record.delay_for("good", seconds=0, on_commit=False)

    worker = DelayWorker(["other", "tests"], celery_app=parked)
    result = worker.run_pass()

    assert {job.id for job in result.claimed} == {deep_id, other.id, good.id}
    assert worker.dispatched == 2
    assert r.zrange(Q.dead, 0, -1) == [deep_id]
    assert "corrupt job data" in str(r.hget(Q.job(deep_id), "why"))
    assert r.zscore(queue_keys("other").inflight, other.id) is not None


# ---- etas, options, keys ------------------------------------------------------------------

FIVE_EAST = timezone(timedelta(hours=5))


@pytest.mark.parametrize(
    "eta",
    [
        datetime(1, 1, 1, tzinfo=FIVE_EAST),
        make_aware(datetime(1, 1, 1), ZoneInfo("Asia/Kolkata")),
        datetime(9999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2000, 1, 1, tzinfo=UTC),
        datetime.now(UTC) + timedelta(days=366),
    ],
    ids=["year 1 +5h", "year 1 Kolkata", "year 9999 -5h", "year 2000", "beyond MAX_DELAY"],
)
def test_etas_out_of_bounds_are_refused_before_any_write(unchanged: None, eta: datetime) -> None:
    with pytest.raises(InvalidDelay):
        jobs.record.delay_until("x", eta=eta, on_commit=False)
    with pytest.raises(InvalidDelay):
        delayqueue.reschedule("tests", key="k", eta=eta)


def test_an_eta_in_the_recent_past_runs_at_once(r: redis.Redis) -> None:
    job = jobs.record.delay_until("x", eta=datetime.now(UTC) - timedelta(hours=1), on_commit=False)
    assert DelayWorker(["tests"]).run_pass().claimed[0].id == job.id


@pytest.mark.parametrize("key", ["k\ud800", "\udfff", "ok" + "\ud83d"])
def test_a_key_that_is_not_unicode_is_refused_at_the_call(unchanged: None, key: str) -> None:
    with pytest.raises(InvalidKey, match="lone surrogate"):
        jobs.record.delay_for("x", seconds=1, key=key, on_commit=False)
    with pytest.raises(InvalidKey):
        delayqueue.cancel("tests", key=key)
    with pytest.raises(InvalidKey):
        delayqueue.reschedule("brand-new-queue", key=key, delay=1)


@pytest.mark.django_db(transaction=True)
def test_a_bad_key_inside_a_transaction_fails_before_the_commit(r: redis.Redis) -> None:
    before = snapshot(r)
    with pytest.raises(InvalidKey), transaction.atomic():
        jobs.record.delay_for("x", seconds=1, key="k\ud800", on_commit=True)
    assert snapshot(r) == before  # not even the queue registry


@pytest.mark.parametrize(
    "timeout", [0.0004, 0.05, 1e300, 1e306, float("inf"), float("nan"), True, "5", -1, 0]
)
def test_visibility_timeout_is_bounded_everywhere(unchanged: None, timeout: Any) -> None:
    with pytest.raises(InvalidOption):
        delayqueue.enqueue(jobs.record, ["x"], delay=1, visibility_timeout=timeout, on_commit=False)
    with pytest.raises(InvalidOption):
        delayqueue.delayed_task(visibility_timeout=timeout)
    with pytest.raises(InvalidOption):
        DelayWorker(["tests"], visibility_timeout=timeout)


def test_visibility_timeout_settings_and_flags_use_the_same_bounds() -> None:
    from django.core.checks import run_checks
    from django.core.management import CommandError, call_command

    with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "VISIBILITY_TIMEOUT": 0.0004}):
        assert "delayqueue.E004" in {m.id for m in run_checks()}
    with pytest.raises(CommandError, match="--visibility-timeout"):
        call_command("run_delay_worker", "--once", "--visibility-timeout", "1e300")
    with pytest.raises(CommandError, match="--claim-size"):
        call_command("run_delay_worker", "--once", "--claim-size", "0")


def test_a_small_visibility_timeout_is_stored_in_whole_ms(r: redis.Redis) -> None:
    job = delayqueue.enqueue(jobs.record, ["x"], delay=1, visibility_timeout=0.25, on_commit=False)
    assert stored_job(r, Q, job.id)["vt"] == "250"


@pytest.mark.parametrize(
    "option",
    [{"max_attempts": 0}, {"max_attempts": 10**6}, {"backoff": -1}, {"backoff": float("nan")}],
)
def test_decorator_options_are_checked_at_decoration(option: dict[str, Any]) -> None:
    with pytest.raises(InvalidOption):
        delayqueue.delayed_task(**option)


@pytest.mark.parametrize("call", [{"order_id": 7}, "abc", b"ab", 7, {1, 2}])
def test_delay_many_takes_only_lists_of_positional_arguments(unchanged: None, call: Any) -> None:
    with pytest.raises(NotSerializable, match="call 1 is a"):
        jobs.record.delay_many([["fine"], call], seconds=1, on_commit=False)
    with pytest.raises(NotSerializable, match="call 0 is a"):
        jobs.record.delay_many([call], seconds=1, on_commit=False)


def test_huge_ints_are_not_serializable(unchanged: None) -> None:
    with pytest.raises(NotSerializable):
        jobs.record.delay_for(10**5000, seconds=1, on_commit=False)


# ---- Redis error replies ------------------------------------------------------------------


def test_out_of_memory_is_a_documented_error_and_writes_nothing(r: redis.Redis) -> None:
    jobs.record.delay_for("warm", seconds=60, on_commit=False)
    before = snapshot(r)
    r.config_set("maxmemory-policy", "noeviction")
    r.config_set("maxmemory", 1)
    try:
        with pytest.raises(RedisOutOfMemory, match="OOM"):
            jobs.record.delay_for("x", seconds=1, on_commit=False)
        with pytest.raises(RedisOutOfMemory):
            jobs.record.delay_many([["a"], ["b"]], seconds=1, on_commit=False)
    finally:
        r.config_set("maxmemory", 0)
    assert snapshot(r) == before


def test_a_replica_answers_read_only(tmp_path: Any) -> None:
    replica = RedisServer(extra=["--replicaof", "127.0.0.1", "1"]).start()
    try:
        with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "REDIS_URL": replica.url}):
            with pytest.raises(RedisReadOnly, match="READONLY"):
                jobs.record.delay_for("x", seconds=1, on_commit=False)
    finally:
        replica.cleanup()


def test_an_acl_user_without_rights_gets_permission_denied(r: redis.Redis) -> None:
    r.acl_setuser("dq-readonly", enabled=True, passwords=["+pw-secret"], commands=["+ping"])
    try:
        url = str(settings.DELAYQUEUE["REDIS_URL"]).replace("://", "://dq-readonly:pw-secret@")
        with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "REDIS_URL": url}):
            with pytest.raises(RedisPermissionDenied) as raised:
                jobs.record.delay_for("x", seconds=1, on_commit=False)
            with pytest.raises(RedisPermissionDenied):
                delayqueue.cancel("tests", key="k")
        assert "pw-secret" not in str(raised.value)
    finally:
        r.acl_deluser("dq-readonly")


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            redis.exceptions.ResponseError("MISCONF Redis is configured to save RDB"),
            RedisMisconfigured,
        ),
        (redis.exceptions.BusyLoadingError("LOADING Redis is loading"), RedisLoading),
        (
            redis.exceptions.OutOfMemoryError("command not allowed when used memory"),
            RedisOutOfMemory,
        ),
        (redis.exceptions.ResponseError("WRONGTYPE Operation against a key"), RedisError),
    ],
)
def test_every_error_reply_maps_to_a_delayqueue_error(reply: Exception, error: type) -> None:
    assert isinstance(translate(reply), error)
    assert isinstance(translate(reply), DelayQueueError)


def test_password_in_the_query_string_is_redacted_from_errors() -> None:
    url = "redis://127.0.0.1:1/0?password=hunter2"
    with override_settings(DELAYQUEUE={"REDIS_URL": url, "SOCKET_TIMEOUT": 0.5}):
        with pytest.raises(DelayQueueError) as raised:
            jobs.record.delay_for("x", seconds=1, on_commit=False)
    assert "hunter2" not in str(raised.value)


# ---- failures the Celery side records -----------------------------------------------------


def test_a_failure_whose_message_is_not_unicode_is_recorded_escaped(r: redis.Redis) -> None:
    job = jobs.record.delay_for("x", seconds=0, on_commit=False)
    claimed = DelayWorker(["tests"]).run_pass().claimed[0]

    def explode() -> None:
        raise ValueError("bad \ud800 data")

    with pytest.raises(ValueError):
        run_job(explode, [], {}, ("tests", job.id, claimed.token))
    assert r.zscore(Q.scheduled, job.id) is not None  # retried, not lost
    assert r.hget(Q.job(job.id), "err") == "ValueError: bad \\ud800 data"


@pytest.mark.parametrize("backoff", [lambda n: 1 / 0, lambda n: float("nan"), lambda n: -1])
def test_a_backoff_function_that_fails_falls_back_to_the_default(
    r: redis.Redis, backoff: Callable[[int], float], caplog: pytest.LogCaptureFixture
) -> None:
    """The first retry then comes after the default backoff: BACKOFF_BASE (10 s) with its
    +-20 % jitter, not at once and not never."""
    job = jobs.record.delay_for("x", seconds=0, on_commit=False)
    claimed = DelayWorker(["tests"]).run_pass().claimed[0]

    def explode() -> None:
        raise ValueError("boom")

    seconds, micros = r.time()
    before_ms = seconds * 1000 + micros // 1000
    with pytest.raises(ValueError):
        run_job(explode, [], {}, ("tests", job.id, claimed.token), backoff=backoff)
    seconds, micros = r.time()
    after_ms = seconds * 1000 + micros // 1000
    due = r.zscore(Q.scheduled, job.id)
    assert due is not None
    assert before_ms + 8_000 <= due <= after_ms + 12_000
    assert "using the default backoff" in caplog.text


# ---- one queue's trouble is not every queue's ---------------------------------------------


def test_a_queue_with_a_broken_key_does_not_stop_the_others(r: redis.Redis, parked: Celery) -> None:
    good = jobs.record.delay_for("good", seconds=0, on_commit=False)
    r.set(queue_keys("broken").scheduled, "not a zset")
    r.sadd(global_keys().queues, "broken", b"\xff\xfe")
    worker = DelayWorker(celery_app=parked)
    worker._heartbeat()  # reads the registry: a non-UTF-8 name is skipped, not fatal
    assert "broken" in worker.queues and "tests" in worker.queues
    result = worker.run_pass()
    assert [job.id for job in result.claimed] == [good.id]
    assert worker.dispatched == 1


def test_unknown_script_errors_do_not_escape_as_redis_py_errors(r: redis.Redis) -> None:
    r.set(Q.scheduled, "not a zset")
    with pytest.raises(RedisError, match="WRONGTYPE"):
        jobs.record.delay_for("x", seconds=1, on_commit=False)
    with pytest.raises(RedisError):
        delayqueue.cancel("tests", key="k")
    r.delete(Q.scheduled)  # repaired: the same process schedules and cancels again
    job = jobs.record.delay_for("x", seconds=1, key="k", on_commit=False)
    assert r.zscore(Q.scheduled, job.id) is not None
    assert delayqueue.cancel("tests", key="k") is True


# ---- found by the fuzzers -----------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: delayqueue.enqueue(
            jobs.record, [], delay=0, max_attempts=10**5000, on_commit=False
        ),
        lambda: delayqueue.delayed_task(max_attempts=10**5000),
        lambda: jobs.record.delay_for(seconds=10**5000, on_commit=False),
        lambda: delayqueue.delay_many([{"task": "x"}], on_commit=False),  # type: ignore[list-item]
    ],
    ids=["max_attempts", "decorator", "seconds", "delay_many item"],
)
def test_huge_or_odd_values_get_a_delayqueue_error(
    unchanged: None, call: Callable[[], object]
) -> None:
    with pytest.raises(DelayQueueError):
        call()


@pytest.mark.parametrize("token", ["\udcff", "nan", "1.5", "", "9" * 20])
def test_a_dispatch_whose_headers_delayqueue_did_not_write_is_not_run(
    r: redis.Redis, token: str
) -> None:
    job = jobs.record.delay_for("x", seconds=0, on_commit=False)
    DelayWorker(["tests"]).run_pass()
    ran: list[int] = []
    assert run_job(lambda: ran.append(1), [], {}, ("tests", job.id, token)) is None
    assert not ran and r.zscore(Q.inflight, job.id) is not None


def test_a_broken_queue_key_does_not_make_the_celery_side_raise(
    r: redis.Redis, parked: Celery
) -> None:
    """begin cannot record the start (the queue's in-flight key is not a zset): the task
    does not run and nothing is raised into Celery; the job waits to be reaped."""
    job = jobs.record.delay_for("x", seconds=0, on_commit=False)
    [claimed] = DelayWorker(["tests"], celery_app=parked).run_pass().claimed
    deadline = r.zscore(Q.inflight, job.id)
    r.rename(Q.inflight, "saved")
    r.set(Q.inflight, "not a zset")
    ran: list[int] = []
    assert run_job(lambda: ran.append(1), [], {}, ("tests", job.id, claimed.token)) is None
    assert not ran
    r.delete(Q.inflight)
    r.rename("saved", Q.inflight)
    assert r.zscore(Q.inflight, job.id) == deadline


def test_an_option_equal_to_a_valid_one_but_of_another_type_is_still_refused(
    r: redis.Redis,
) -> None:
    """spec() remembers the checked options of a task's last calls: True equals 1 (and
    hashes alike) but is no number of seconds or attempts."""
    delayqueue.enqueue(jobs.record, ["x"], delay=1, visibility_timeout=1, on_commit=False)
    delayqueue.enqueue(jobs.record, ["x"], delay=1, max_attempts=1, on_commit=False)
    before = snapshot(r)
    with pytest.raises(InvalidOption):
        delayqueue.enqueue(jobs.record, ["x"], delay=1, visibility_timeout=True, on_commit=False)
    with pytest.raises(InvalidOption):
        delayqueue.enqueue(jobs.record, ["x"], delay=1, max_attempts=True, on_commit=False)
    assert snapshot(r) == before
