"""delayqueue as a backend of Django's Tasks framework (``delayqueue.tasks_backend``): on
``django.tasks`` (Django 6) or the django-tasks backport (Django 5.2), on the suite's real
Redis, with a real Celery worker and real delay workers.

The ideas of Django's own tests of its dummy and immediate backends (enqueue, the result's
fields and status, validation, get_result, signals, async), adapted: here a job runs later,
in another process, and its result is read back from Redis."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any

import pytest
from django.urls import reverse

compat = pytest.importorskip("delayqueue.django_tasks.compat")

import redis  # noqa: E402
from django.db import transaction  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402

import delayqueue  # noqa: E402
from delayqueue.django_tasks.job_args import BACKOFF, RUN_DJANGO_TASK  # noqa: E402
from delayqueue.django_tasks.task import DelayQueueTask  # noqa: E402
from delayqueue.engine.keys import (  # noqa: E402
    STATES,
    JobField,
    TaskResultField,
    new_job_id,
    queue_keys,
)
from delayqueue.errors import InvalidDelay, NotSerializable, PayloadTooLarge  # noqa: E402
from delayqueue.tasks_backend import DelayQueueBackend  # noqa: E402
from tests.support import tasks_framework as tasks  # noqa: E402
from tests.support.stored import stored_job  # noqa: E402
from tests.support.waiting import wait_for  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

Status = compat.TaskResultStatus
Q = queue_keys("default")
BACKEND = "delayqueue.tasks_backend.DelayQueueBackend"


def tasks_setting(queues: list[str] | None = None, **options: Any) -> dict[str, Any]:
    return {
        "default": {
            "BACKEND": BACKEND,
            # (the demo's reminder, orders_demo/tasks.py, is a task of "orders")
            "QUEUES": ["default", "orders"] if queues is None else queues,
            "OPTIONS": {"BACKOFF": 0.05, "MAX_ATTEMPTS": 3, **options},
        }
    }


@pytest.fixture(autouse=True)
def delayqueue_backend() -> Iterator[None]:
    """TASKS names this backend (the tasks module was imported under the default one)."""
    with override_settings(TASKS=tasks_setting()):
        yield


def ms(moment: Any) -> float:
    return float(moment.timestamp() * 1000)


def signals_sent(count: int) -> list[dict[str, Any]]:
    """The signals the worker reported, once there are ``count``: ``task_finished`` is sent
    after the outcome is written, which a reader may find first."""
    wait_for(lambda: len(tasks.reports(tasks.SIGNALS)) >= count, 10)
    return tasks.reports(tasks.SIGNALS)


def finished(result: Any, timeout: float = 20) -> Any:
    """``result``, refreshed until it finished (SUCCESSFUL or FAILED)."""

    def done() -> bool:
        result.refresh()
        return bool(result.is_finished)

    wait_for(done, timeout)
    return result


# ---- the backend, without a worker -----------------------------------------------------


def test_the_backend_has_all_four_capabilities() -> None:
    backend = compat.task_backends["default"]
    assert isinstance(backend, DelayQueueBackend)
    assert backend.supports_defer and backend.supports_async_task
    assert backend.supports_get_result and backend.supports_priority


def test_enqueue_writes_a_job_whose_id_is_the_result_id(r: redis.Redis) -> None:
    before = timezone.now()
    result = tasks.add.using(priority=7).enqueue("e", 1, b=2)
    assert result.status == Status.READY and not result.is_finished
    assert result.task.priority == 7 and result.backend == "default"
    assert result.args == ["e", 1] and result.kwargs == {"b": 2}
    assert result.errors == [] and result.worker_ids == [] and result.attempts == 0
    assert result.started_at is None and result.finished_at is None
    assert result.enqueued_at is not None
    assert before - timedelta(milliseconds=1) <= result.enqueued_at <= timezone.now()
    assert r.zscore(Q.scheduled, result.id) is not None
    fetched = compat.task_backends["default"].get_result(result.id)
    assert fetched.status == Status.READY and fetched.task.func is tasks.add.func
    assert fetched.task.priority == 7 and fetched.args == ["e", 1] and fetched.kwargs == {"b": 2}
    assert fetched.enqueued_at == result.enqueued_at
    with pytest.raises(ValueError, match="not finished"):
        fetched.return_value  # noqa: B018


def test_run_after_is_the_due_time_rounded_up_to_its_millisecond(r: redis.Redis) -> None:
    run_after = (timezone.now() + timedelta(hours=1)).replace(microsecond=123_456)
    result = tasks.add.using(run_after=run_after).enqueue("later", 1, 2)
    assert r.zscore(Q.scheduled, result.id) == math.ceil(ms(run_after))
    exact = run_after.replace(microsecond=250_000)
    result = tasks.add.using(run_after=exact).enqueue("exact", 1, 2)
    assert r.zscore(Q.scheduled, result.id) == ms(exact)


def test_run_after_is_checked_against_max_delay_as_an_eta_is(r: redis.Redis) -> None:
    for far in (timezone.now() + timedelta(days=3650), datetime(1, 1, 1, tzinfo=UTC)):
        with pytest.raises(InvalidDelay, match="run_after is .* MAX_DELAY"):
            tasks.add.using(run_after=far).enqueue("far", 1, 2)
    assert r.zcard(Q.scheduled) == 0


def test_a_naive_run_after_is_in_time_zone_when_use_tz_is_off(r: redis.Redis) -> None:
    """Django's backends accept a naive run_after when USE_TZ is off (its validate_task);
    it is read as Django reads naive datetimes then, in TIME_ZONE, whatever time zone a
    request activated."""
    aware = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        naive = aware.astimezone(timezone.get_default_timezone()).replace(tzinfo=None)
        with timezone.override("Asia/Tokyo"):
            result = tasks.add.using(run_after=naive).enqueue("naive", 1, 2)
    assert r.zscore(Q.scheduled, result.id) == ms(aware)


class _NoOffset(tzinfo):
    """A time zone whose offset cannot be read."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        raise RuntimeError("no offset here")

    def dst(self, dt: datetime | None) -> timedelta:
        return timedelta(0)

    def tzname(self, dt: datetime | None) -> str:
        return "nowhere"


def test_a_time_zone_that_cannot_give_its_offset_is_invalid_delay(r: redis.Redis) -> None:
    """The same check as an eta's (delayqueue.producer.due.is_naive), naming run_after."""
    broken = datetime(2030, 1, 1, tzinfo=_NoOffset())
    with override_settings(USE_TZ=False):  # (Django's own check, under USE_TZ, raises first)
        with pytest.raises(InvalidDelay, match="run_after's time zone .* no valid offset"):
            tasks.add.using(run_after=broken).enqueue("broken", 1, 2)
    with pytest.raises(InvalidDelay, match="eta's time zone .* no valid offset"):
        delayqueue.enqueue("tests.support.jobs.record", eta=broken)
    assert r.zcard(Q.scheduled) == 0


def test_cancel_by_result_id_removes_the_job(r: redis.Redis) -> None:
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("c", 1, 2)
    assert delayqueue.cancel("default", result.id) is True
    assert r.zscore(Q.scheduled, result.id) is None
    with pytest.raises(compat.TaskResultDoesNotExist):
        result.refresh()


def test_inside_a_transaction_the_job_is_written_at_commit_and_never_on_rollback(
    r: redis.Redis,
) -> None:
    sent: list[Any] = []

    def enqueued(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append((sender, task_result.id))

    compat.task_enqueued.connect(enqueued)
    try:
        with pytest.raises(RuntimeError), transaction.atomic():
            rolled_back = tasks.add.enqueue("rollback", 1, 2)
            raise RuntimeError("roll back")
        assert r.zscore(Q.scheduled, rolled_back.id) is None and sent == []
        with pytest.raises(compat.TaskResultDoesNotExist):
            rolled_back.refresh()
        with transaction.atomic():
            committed = tasks.add.enqueue("commit", 1, 2)
            assert r.zscore(Q.scheduled, committed.id) is None and sent == []
        assert r.zscore(Q.scheduled, committed.id) is not None
        assert sent == [(DelayQueueBackend, committed.id)]
    finally:
        compat.task_enqueued.disconnect(enqueued)


def test_on_commit_off_writes_at_once_inside_a_transaction(r: redis.Redis) -> None:
    with override_settings(TASKS=tasks_setting(ON_COMMIT=False)):
        with pytest.raises(RuntimeError), transaction.atomic():
            result = tasks.add.enqueue("now", 1, 2)
            assert r.zscore(Q.scheduled, result.id) is not None
            raise RuntimeError("roll back")
    assert r.zscore(Q.scheduled, result.id) is not None  # written: the rollback kept it


def test_aenqueue_and_aget_result_on_the_event_loop(r: redis.Redis) -> None:
    async def main() -> tuple[Any, Any]:
        result = await tasks.async_add.aenqueue("a", 2, 3)
        return result, await tasks.async_add.aget_result(result.id)

    result, fetched = asyncio.run(main())
    assert r.zscore(Q.scheduled, result.id) is not None
    assert fetched.id == result.id and fetched.status == Status.READY
    assert fetched.args == ["a", 2, 3]
    with pytest.raises(compat.TaskResultDoesNotExist):
        asyncio.run(compat.task_backends["default"].aget_result(new_job_id()))


# (ids of their own: the fresh id differs in each pytest-xdist worker's collection)
@pytest.mark.parametrize("result_id", ["nope", "", new_job_id()], ids=["nope", "empty", "fresh"])
def test_an_unknown_id_does_not_exist(result_id: str) -> None:
    with pytest.raises(compat.TaskResultDoesNotExist):
        compat.task_backends["default"].get_result(result_id)


def test_get_result_of_a_job_of_another_task_does_not_exist() -> None:
    job = delayqueue.enqueue("tests.support.jobs.plain", ["x"], delay=3600, queue="default")
    with pytest.raises(compat.TaskResultDoesNotExist, match="not a Django task"):
        compat.task_backends["default"].get_result(job.id)


def test_task_result_mismatch() -> None:
    result = tasks.add.enqueue("m", 1, 2)
    with pytest.raises(compat.TaskResultMismatch):
        tasks.async_add.get_result(result.id)
    assert tasks.add.get_result(result.id).id == result.id


def test_bad_data_in_redis_never_breaks_get_result(r: redis.Redis) -> None:
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("b", 1, 2)
    key = Q.task_result(result.id)
    r.hset(key, mapping={TaskResultField.WORKERS: "{not json", TaskResultField.ERRORS: "[1, 2]"})
    r.hset(key, TaskResultField.STARTED, "yesterday")
    r.hset(key, TaskResultField.LAST_ATTEMPT, b"\xff\xfe")
    fetched = compat.task_backends["default"].get_result(result.id)
    assert fetched.status == Status.READY and fetched.worker_ids == [] and fetched.errors == []
    assert fetched.started_at is None and fetched.last_attempted_at is None
    r.hset(key, TaskResultField.STARTED, "999999999999999")  # ms in the year 33658
    assert compat.task_backends["default"].get_result(result.id).started_at is None
    # a result whose task is gone, or whose key is of another type
    r.delete(key)
    r.set(key, "a string")
    assert compat.task_backends["default"].get_result(result.id).status == Status.READY
    delayqueue.cancel("default", result.id)
    r.delete(key)
    r.hset(key, mapping={TaskResultField.TASK: "tests.support.tasks_framework.gone"})
    with pytest.raises(compat.TaskResultDoesNotExist, match="cannot be found"):
        compat.task_backends["default"].get_result(result.id)
    r.hset(key, mapping={TaskResultField.TASK: "os.path.join"})
    with pytest.raises(compat.TaskResultDoesNotExist, match="not a Django task"):
        compat.task_backends["default"].get_result(result.id)
    r.hset(key, mapping={TaskResultField.TASK: "tests.support.tasks_framework.add"})
    r.hset(key, TaskResultField.ARGS, "\xff[")
    with pytest.raises(compat.TaskResultDoesNotExist, match="not a Django task"):
        compat.task_backends["default"].get_result(result.id)
    r.hset(key, mapping={TaskResultField.ARGS: "[]", TaskResultField.PRIORITY: "high"})
    with pytest.raises(compat.TaskResultDoesNotExist, match="not a Django task"):
        compat.task_backends["default"].get_result(result.id)
    # an id whose time part is past what a datetime holds (a ULID's goes to the year 10889)
    far = "7ZZZZZZZZZ" + result.id[10:]
    r.hset(
        Q.task_result(far),
        mapping={
            TaskResultField.TASK: "tests.support.tasks_framework.add",
            TaskResultField.ARGS: '["far", 1, 2]',
            TaskResultField.STATUS: "SUCCESSFUL",
            TaskResultField.RETURN: "3",
        },
    )
    fetched = compat.task_backends["default"].get_result(far)
    assert fetched.enqueued_at is None and fetched.args == ["far", 1, 2]


def test_validation_raises_djangos_errors_and_writes_nothing(r: redis.Redis) -> None:
    with pytest.raises(compat.InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(compat.InvalidTask, match="aware"):
        tasks.add.using(run_after=timezone.now().replace(tzinfo=None))
    with pytest.raises(compat.InvalidTask, match="not valid for backend"):
        tasks.add.using(queue_name="elsewhere")

    def local() -> None: ...

    with pytest.raises(compat.InvalidTask, match="module level"):
        compat.task(local)
    with pytest.raises(compat.InvalidTask, match="context"):
        compat.task(takes_context=True)(tasks.always_fails.func)
    with override_settings(TASKS=tasks_setting(queues=[])):
        with pytest.raises(compat.InvalidTask, match="queue name"):
            tasks.add.using(queue_name="not a queue!")
        elsewhere = tasks.add.using(queue_name="elsewhere")  # valid where any queue is
    # enqueued through a backend that did not validate it (QUEUES without "elsewhere"): it
    # is validated there, and refused
    with pytest.raises(compat.InvalidTask, match="not valid for backend"):
        elsewhere.enqueue("e", 1, 2)
    assert r.zcard(Q.scheduled) == 0 and r.zcard(queue_keys("elsewhere").scheduled) == 0


def test_delayqueues_own_checks_of_the_arguments(r: redis.Redis) -> None:
    with pytest.raises(NotSerializable, match=r"args\[1\] is a builtins.object"):
        tasks.add.enqueue("x", object(), 2)  # type: ignore[arg-type]
    with override_settings(DELAYQUEUE={**_delayqueue_settings(), "MAX_PAYLOAD_BYTES": 100}):
        with pytest.raises(PayloadTooLarge):
            tasks.add.enqueue("x" * 200, 1, 2)
        # the limit is the job's as stored: the caller's 94 bytes and the task's path
        assert len(json.dumps(["x" * 86, 1, 2], separators=(",", ":"))) == 94
        with pytest.raises(PayloadTooLarge, match="more than MAX_PAYLOAD_BYTES=100"):
            tasks.add.enqueue("x" * 86, 1, 2)
    # a task is made under a limit its path alone is past: each call is refused instead
    with override_settings(DELAYQUEUE={**_delayqueue_settings(), "MAX_PAYLOAD_BYTES": 10}):
        made = tasks.add.using(priority=8)
        with pytest.raises(PayloadTooLarge):
            made.enqueue("x", 1, 2)
    assert r.zcard(Q.scheduled) == 0


def _delayqueue_settings() -> dict[str, Any]:
    from django.conf import settings

    return dict(settings.DELAYQUEUE)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"RESULT_TTL": 0}, "RESULT_TTL"),
        ({"MAX_ATTEMPTS": "3"}, "MAX_ATTEMPTS"),
        ({"ON_COMMIT": "yes"}, "ON_COMMIT"),
        ({"BACKOFF": -1}, "BACKOFF"),
        ({"RESULTS_TTL": 5}, "unknown options"),
    ],
)
def test_bad_options_are_refused_when_the_backend_is_made(
    options: dict[str, Any], message: str
) -> None:
    with override_settings(TASKS=tasks_setting(**options)):
        with pytest.raises(compat.InvalidTaskBackend, match=message):
            compat.task_backends["default"]  # noqa: B018
    with override_settings(TASKS=tasks_setting(queues=["bad queue"])):
        with pytest.raises(compat.InvalidTaskBackend, match="QUEUES"):
            compat.task_backends["default"]  # noqa: B018


def own_options_task(func: Any, **options: Any) -> Any:
    """``func`` as a task of this backend with its own retry options: through ``@task``
    where it passes them on to the backend's ``task_class`` (Django 6.1, the backport),
    else (Django 6.0) the backend's task class itself."""
    try:
        return compat.task(**options)(func)
    except TypeError:  # Django 6.0: its Task's fields have no defaults
        return DelayQueueTask(
            func=func, priority=0, backend="default", queue_name="default", run_after=None,
            **options,
        )  # fmt: skip


def test_a_task_s_own_retry_options_go_with_its_job_over_the_backend_s(r: redis.Redis) -> None:
    assert compat.task_backends["default"].task_class is DelayQueueTask
    own = own_options_task(tasks.add.func, max_attempts=7, backoff=2.5, visibility_timeout=45)
    assert isinstance(own, DelayQueueTask) and own.max_attempts == 7
    result = own.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("own", 1, 2)
    job = stored_job(r, Q, result.id)
    assert job[JobField.MAX_ATTEMPTS] == "7" and job[JobField.VISIBILITY_MS] == "45000"
    assert json.loads(job[JobField.KWARGS])[BACKOFF] == 2.5
    # a task without its own options takes the backend's OPTIONS (MAX_ATTEMPTS 3, BACKOFF 0.05)
    plain = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("p", 1, 2)
    job = stored_job(r, Q, plain.id)
    assert job[JobField.MAX_ATTEMPTS] == "3" and JobField.VISIBILITY_MS not in job
    assert json.loads(job[JobField.KWARGS])[BACKOFF] == 0.05
    # .using() keeps them; bad ones are Django's InvalidTask when the task is made
    assert own.using(priority=3).max_attempts == 7
    for bad in ({"max_attempts": 0}, {"backoff": -1}, {"visibility_timeout": "soon"}):
        with pytest.raises(compat.InvalidTask, match=next(iter(bad))):
            own_options_task(tasks.add.func, **bad)


# ---- run by a real Celery worker -----------------------------------------------------------


def test_a_task_runs_no_earlier_than_run_after_and_its_result_says_so(
    celery_worker: Any, delay_worker: Any, r: redis.Redis
) -> None:
    delay_worker("--queues", "default")
    run_after = (timezone.now() + timedelta(seconds=1.5)).replace(microsecond=456_789)
    run_after += timedelta(seconds=1)
    result = tasks.add.using(run_after=run_after).enqueue("due", 2, 3)
    finished(result)
    (run,) = tasks.reports()
    assert run["redis_ms"] >= ms(run_after), "started before run_after (Redis's clock)"
    assert result.status == Status.SUCCESSFUL and result.return_value == 5
    assert result.errors == [] and len(result.worker_ids) == 1 and result.attempts == 1
    assert result.worker_ids[0].startswith("celery@")
    enqueued, started, finished_at = result.enqueued_at, result.started_at, result.finished_at
    assert enqueued is not None and started is not None and finished_at is not None
    assert enqueued < run_after <= started <= finished_at and started == result.last_attempted_at
    # the job is acked (just after its result was recorded): gone from delayqueue; its
    # result stays for RESULT_TTL, and says the same
    wait_for(lambda: not any(r.zscore(Q.of_state(s), result.id) for s in STATES))
    result.refresh()
    assert result.status == Status.SUCCESSFUL and result.return_value == 5
    assert 0 < r.ttl(Q.task_result(result.id)) <= 24 * 3600
    signals = [(s["signal"], s["status"], s["sender"]) for s in signals_sent(2)]
    sender = "delayqueue.django_tasks.backend.DelayQueueBackend"
    assert signals == [("task_started", "RUNNING", sender), ("task_finished", "SUCCESSFUL", sender)]


def test_async_task_and_context(celery_worker: Any, delay_worker: Any) -> None:
    delay_worker("--queues", "default")
    async_result = asyncio.run(tasks.async_add.aenqueue("async", 20, 22))
    context_result = tasks.with_context.enqueue("context")
    assert finished(async_result).return_value == 42
    assert finished(context_result).return_value == {"attempt": 1, "id": context_result.id}
    fetched = asyncio.run(tasks.async_add.aget_result(async_result.id))
    assert fetched.status == Status.SUCCESSFUL and fetched.return_value == 42


def test_a_failed_attempt_is_retried_and_its_error_kept(
    celery_worker: Any, delay_worker: Any
) -> None:
    delay_worker("--queues", "default")
    result = finished(tasks.fails_first.enqueue("retry"))
    assert result.status == Status.SUCCESSFUL and result.return_value == 2
    assert [run["attempt"] for run in tasks.reports()] == [1, 2]
    (error,) = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "first attempt of retry" in error.traceback and "Traceback" in error.traceback
    assert len(result.worker_ids) == 2 and result.attempts == 2
    assert result.started_at < result.last_attempted_at < result.finished_at
    # task_finished once, when it finished; task_started at each attempt
    signals = [(s["signal"], s["status"]) for s in signals_sent(3)]
    assert signals == [
        ("task_started", "RUNNING"),
        ("task_started", "RUNNING"),
        ("task_finished", "SUCCESSFUL"),
    ]


def test_a_job_that_fails_every_attempt_is_dead_and_failed(
    celery_worker: Any, delay_worker: Any, r: redis.Redis
) -> None:
    delay_worker("--queues", "default")
    with override_settings(TASKS=tasks_setting(MAX_ATTEMPTS=2)):
        result = finished(tasks.always_fails.enqueue("dead"))
        assert result.status == Status.FAILED
        assert [e.exception_class_path for e in result.errors] == ["builtins.KeyError"] * 2
        assert abs((r.zscore(Q.dead, result.id) or 0) - ms(result.finished_at)) < 1
        with pytest.raises(ValueError, match="failed"):
            result.return_value  # noqa: B018
        signals = [(s["signal"], s["status"]) for s in signals_sent(3)]
        assert signals[-1] == ("task_finished", "FAILED") and len(signals) == 3
        # a value that is not JSON fails the attempt, as Django's backends fail it
        bad = finished(tasks.returns_no_json.enqueue("no json"))
        assert bad.status == Status.FAILED and bad.errors[0].exception_class_path.endswith(
            "TypeError"
        )


def test_a_task_s_own_max_attempts_decides_when_its_job_is_dead(
    celery_worker: Any, delay_worker: Any, r: redis.Redis
) -> None:
    delay_worker("--queues", "default")
    own = own_options_task(tasks.always_fails.func, max_attempts=1)
    result = finished(own.enqueue("once"))  # the backend's OPTIONS say 3 attempts
    assert result.status == Status.FAILED and len(result.errors) == 1
    assert r.zscore(Q.dead, result.id) is not None
    assert [run["tag"] for run in tasks.reports()] == ["once"]


def test_running_then_successful(celery_worker: Any, delay_worker: Any, r: redis.Redis) -> None:
    delay_worker("--queues", "default")
    result = tasks.waits_for_release.enqueue("hold")

    def running() -> bool:
        result.refresh()
        return bool(result.status == Status.RUNNING)

    wait_for(running)
    assert result.started_at is not None and result.finished_at is None
    assert len(result.worker_ids) == 1 and r.zscore(Q.inflight, result.id) is not None
    r.rpush(tasks.release("hold"), "go")
    assert finished(result).return_value == "hold"


def test_a_cancelled_job_never_runs(celery_worker: Any, delay_worker: Any) -> None:
    delay_worker("--queues", "default")
    cancelled = tasks.add.using(run_after=timezone.now() + timedelta(seconds=1)).enqueue(
        "cancelled", 1, 2
    )
    assert delayqueue.cancel("default", cancelled.id)
    after = finished(tasks.add.using(run_after=timezone.now() + timedelta(seconds=1.5)).enqueue(
        "after", 1, 2
    ))  # fmt: skip
    assert after.status == Status.SUCCESSFUL
    assert [run["tag"] for run in tasks.reports()] == ["after"]
    with pytest.raises(compat.TaskResultDoesNotExist):
        cancelled.refresh()


def test_a_result_expires_after_result_ttl(celery_worker: Any, delay_worker: Any) -> None:
    delay_worker("--queues", "default")
    with override_settings(TASKS=tasks_setting(RESULT_TTL=1)):
        result = finished(tasks.add.enqueue("ttl", 1, 2))
        assert result.status == Status.SUCCESSFUL

        def expired() -> bool:
            try:
                result.refresh()
            except compat.TaskResultDoesNotExist:
                return True
            return False

        wait_for(expired, 5)


def test_the_job_is_an_ordinary_delayqueue_job(r: redis.Redis) -> None:
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("j", 1, 2)
    moved = delayqueue.reschedule("default", result.id, delay=7200)
    assert moved is not None and moved.task == RUN_DJANGO_TASK
    assert compat.task_backends["default"].get_result(result.id).status == Status.READY


def test_the_admin_lists_and_shows_a_django_task_like_any_job(
    admin_client: Any, r: redis.Redis
) -> None:
    result = tasks.add.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("a", 1, 2)
    listed = admin_client.get(
        reverse("admin:delayqueue_delayedjob_list", args=["default", "scheduled"])
    )
    assert listed.status_code == 200
    page = listed.content.decode()
    assert result.id in page and "run_django_task" in page
    shown = admin_client.get(
        reverse("admin:delayqueue_delayedjob_job", args=["default", result.id])
    )
    assert shown.status_code == 200
    assert tasks.add.module_path in shown.content.decode()  # the Django task, in the arguments


def test_among_jobs_due_in_one_pass_higher_priority_is_dispatched_first(
    r: redis.Redis, parked_celery: Any
) -> None:
    from delayqueue.worker.loop import DelayWorker
    from tests.support.corrupt import decode_message, take_messages

    take_messages()
    due = timezone.now() - timedelta(seconds=1)  # all due, claimed in one pass
    priorities = [0, 50, -10, 100, 5, -100, 50]
    made = [
        tasks.add.using(run_after=due, priority=p).enqueue(f"p{i}", p, 0)
        for i, p in enumerate(priorities)
    ]
    worker = DelayWorker(["default"], celery_app=parked_celery)
    try:
        assert len(worker.run_pass().claimed) == len(made)
    finally:
        worker.close()
    sent = [decode_message(m) for m in take_messages()]
    tags = [m.args[1][0] for m in sent]  # args: (module path, [tag, a, b], kwargs)
    # 100, 50, 50 (the two of equal priority in the order they were due), 5, 0, -10, -100
    assert tags == ["p3", "p1", "p6", "p4", "p0", "p2", "p5"]
