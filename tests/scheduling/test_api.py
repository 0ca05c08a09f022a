"""The client API: scheduling, idempotency, transactions and every bad input."""

from __future__ import annotations

import asyncio
import math
import threading
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
import redis
from django.conf import settings
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone
from django.utils.connection import ConnectionDoesNotExist

import delayqueue
from delayqueue.engine import clients as connection
from delayqueue.engine.clients import redis_now_ms
from delayqueue.engine.execution import get_scripts
from delayqueue.engine.keys import STATS_TTL_SECONDS, current_minute, global_keys, queue_keys
from orders_demo.models import Product
from tests.support import jobs
from tests.support.corrupt import keys_of_the_test
from tests.support.data_redis import command_calls
from tests.support.stored import stored_job

SCHEDULED = queue_keys("tests").scheduled


def stored(r: redis.Redis, job: delayqueue.Job, queue: str = "tests") -> dict[str, str]:
    """A job as Redis holds it: its hash and, while it was never claimed, its packed spec."""
    return stored_job(r, queue_keys(queue), job.id)


def test_delay_for_schedules_at_redis_now_plus_delay(r: redis.Redis) -> None:
    before = redis_now_ms(r)
    job = jobs.record.delay_for("a", minutes=2, on_commit=False)
    after = redis_now_ms(r)
    assert job.state == "scheduled" and job.outcome == "created" and job.queue == "tests"
    score = r.zscore(SCHEDULED, job.id)
    assert score is not None and before + 120_000 <= score <= after + 120_000
    assert job.due_at is not None and int(job.due_at.timestamp() * 1000) == score
    assert stored(r, job)["args"] == '["a"]'
    assert r.sismember(global_keys().queues, "tests")


@pytest.mark.parametrize(
    ("kwargs", "ms"),
    [
        ({"seconds": 1.5}, 1500),
        ({"minutes": 1}, 60_000),
        ({"hours": 1}, 3_600_000),
        ({"days": 1}, 86_400_000),
        ({"delta": timedelta(seconds=90)}, 90_000),
    ],
)
def test_each_delay_unit(r: redis.Redis, kwargs: dict[str, object], ms: int) -> None:
    before = redis_now_ms(r)
    job = jobs.record.delay_for("a", on_commit=False, **kwargs)  # type: ignore[arg-type]
    score = r.zscore(SCHEDULED, job.id)
    assert score is not None and before + ms <= score <= before + ms + 2000


def test_delay_until_uses_the_given_instant(r: redis.Redis) -> None:
    eta = timezone.now() + timedelta(hours=3)
    job = jobs.record.delay_until("a", eta=eta, on_commit=False)
    assert r.zscore(SCHEDULED, job.id) == math.floor(eta.timestamp() * 1000)


def test_function_kwargs_pass_through(r: redis.Redis) -> None:
    job = jobs.record.delay_for(tag="kw", seconds=5, on_commit=False)
    assert stored(r, job)["kwargs"] == '{"tag":"kw"}'
    # `seconds` is reserved by delay_for; a function taking it is scheduled with enqueue():
    job = delayqueue.enqueue(jobs.slow, ("t",), {"seconds": 0.1}, delay=5, on_commit=False)
    assert stored(r, job)["kwargs"] == '{"seconds":0.1}'


def test_enqueue_by_name_for_a_plain_celery_task(r: redis.Redis) -> None:
    job = delayqueue.enqueue(
        "tests.support.jobs.plain", ["p"], delay=10, queue="misc", on_commit=False
    )
    assert job.task == "tests.support.jobs.plain" and job.queue == "misc"
    assert r.zscore(queue_keys("misc").scheduled, job.id) is not None


def test_key_keep_and_replace(r: redis.Redis) -> None:
    first = jobs.record.delay_for("a", seconds=60, key="k", on_commit=False)
    kept = jobs.record.delay_for("b", seconds=600, key="k", on_commit=False)
    assert kept.id == first.id and kept.outcome == "kept" and r.zcard(SCHEDULED) == 1
    moved = jobs.record.delay_for("c", seconds=600, key="k", on_conflict="replace", on_commit=False)
    assert moved.id == first.id and moved.outcome == "replaced"
    assert stored(r, first)["args"] == '["c"]'
    assert moved.due_at is not None and first.due_at is not None
    assert moved.due_at - first.due_at > timedelta(seconds=500)


def test_cancel_and_reschedule_by_key_and_id(r: redis.Redis) -> None:
    job = jobs.record.delay_for("a", hours=1, key="order:1", on_commit=False)
    moved = jobs.record.reschedule(key="order:1", seconds=5)
    assert moved is not None and moved.id == job.id and moved.task == "tests.support.jobs.record"
    assert moved.due_at is not None and job.due_at is not None and moved.due_at < job.due_at
    assert jobs.record.cancel(key="order:1") is True
    assert jobs.record.cancel(key="order:1") is False
    assert jobs.record.reschedule(job.id, seconds=5) is None
    other = jobs.record.delay_for("b", hours=1, on_commit=False)
    assert other.cancel() is True and r.zcard(SCHEDULED) == 0


def test_delay_many_writes_a_batch(r: redis.Redis) -> None:
    created = jobs.record.delay_many([(f"j{i}",) for i in range(300)], seconds=30, on_commit=False)
    assert len({job.id for job in created}) == 300 and r.zcard(SCHEDULED) == 300
    specs = [
        delayqueue.spec(jobs.record, [i], delay=i, key=f"k{i % 10}", queue="batch")
        for i in range(50)
    ]
    written = delayqueue.delay_many(specs, on_commit=False)
    assert r.zcard(queue_keys("batch").scheduled) == 10
    assert sum(job.outcome == "created" for job in written) == 10


def test_delay_many_survives_a_script_flush(r: redis.Redis) -> None:
    jobs.record.delay_many([("a",), ("b",)], seconds=30, on_commit=False)
    r.script_flush()
    jobs.record.delay_many([("c",), ("d",)], seconds=30, on_commit=False)
    assert r.zcard(SCHEDULED) == 4


@pytest.mark.django_db(transaction=True)
def test_on_commit_writes_after_commit_and_never_on_rollback(r: redis.Redis) -> None:
    with transaction.atomic():
        job = jobs.record.delay_for("a", seconds=60)
        assert job.state == "pending" and r.zcard(SCHEDULED) == 0
    assert job.state == "scheduled" and r.zscore(SCHEDULED, job.id) is not None

    with pytest.raises(RuntimeError), transaction.atomic():
        Product.objects.create(name="x", price=Decimal("1.00"), stock=1)
        rolled_back = jobs.record.delay_for("b", seconds=60)
        raise RuntimeError("rollback")
    assert rolled_back.state == "pending" and r.zcard(SCHEDULED) == 1


def _script_calls(r: redis.Redis) -> int:
    return command_calls(r, "evalsha", "eval")


@pytest.mark.django_db(transaction=True)
def test_jobs_of_one_transaction_are_written_in_one_round_trip_at_commit(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    jobs.record.delay_for("warm", seconds=60, on_commit=False)  # scripts loaded, queue known
    before = _script_calls(r)
    caplog.clear()
    with caplog.at_level("INFO", logger="delayqueue.jobs"), transaction.atomic():
        made = [jobs.record.delay_for(f"t{i}", seconds=60) for i in range(5)]
        made += jobs.record.delay_many([("m1",), ("m2",)], seconds=60)
        made.append(jobs.record.delay_for("keyed", seconds=60, key="k1"))
        assert r.zcard(SCHEDULED) == 1 and _script_calls(r) == before
    assert _script_calls(r) == before + 1  # one EVALSHA of 8 jobs, in one round trip
    assert all(job.state == "scheduled" for job in made)
    assert {r.zscore(SCHEDULED, job.id) is not None for job in made} == {True}
    scheduled = [rec for rec in caplog.records if getattr(rec, "transition", "") == "scheduled"]
    assert sorted(rec.job_id for rec in scheduled) == sorted(j.id for j in made)  # type: ignore[attr-defined]
    assert {rec.levelname for rec in scheduled} == {"INFO"}


@pytest.mark.django_db(transaction=True)
def test_a_savepoint_rollback_drops_its_jobs_and_callbacks_keep_their_order(
    r: redis.Redis,
) -> None:
    seen: list[int] = []
    with transaction.atomic():
        kept = jobs.record.delay_for("kept", seconds=60)
        transaction.on_commit(lambda: seen.append(int(r.zcard(SCHEDULED))))
        later = jobs.record.delay_for("later", seconds=60)
        with pytest.raises(RuntimeError), transaction.atomic():
            dropped = jobs.record.delay_for("dropped", seconds=60)
            raise RuntimeError("savepoint rollback")
        last = jobs.record.delay_for("last", seconds=60)
    assert seen == [1]  # the caller's callback ran after "kept" was written, before "later"
    assert r.zscore(SCHEDULED, kept.id) is not None and r.zscore(SCHEDULED, later.id) is not None
    assert r.zscore(SCHEDULED, last.id) is not None
    assert dropped.state == "pending" and r.zscore(SCHEDULED, dropped.id) is None


def test_outside_a_transaction_the_write_is_immediate(r: redis.Redis) -> None:
    job = jobs.record.delay_for("a", seconds=60)
    assert job.state == "scheduled" and r.zcard(SCHEDULED) == 1


# ---- bad input: a clear error at the call, nothing in Redis ------------------------------


class Thing:
    pass


BAD_CALLS = [
    (lambda: jobs.record.delay_for(Thing(), seconds=1), delayqueue.NotSerializable),
    (lambda: jobs.record.delay_for({1, 2}, seconds=1), delayqueue.NotSerializable),
    (lambda: jobs.record.delay_for(datetime.now(), seconds=1), delayqueue.NotSerializable),
    (lambda: jobs.record.delay_for(float("nan"), seconds=1), delayqueue.NotSerializable),
    (lambda: jobs.record.delay_for({1: "int key"}, seconds=1), delayqueue.NotSerializable),
    (lambda: jobs.record.delay_for(b"bytes", seconds=1), delayqueue.NotSerializable),
    (lambda: jobs.record.delay_for("x" * 70_000, seconds=1), delayqueue.PayloadTooLarge),
    (lambda: jobs.record.delay_for("a", seconds=-1), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_for("a", seconds=float("inf")), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_for("a", seconds=float("nan")), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_for("a", seconds="10"), delayqueue.InvalidDelay),  # type: ignore[arg-type]
    (lambda: jobs.record.delay_for("a", seconds=True), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_for("a"), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_for("a", seconds=1, minutes=1), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_for("a", days=400), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_until("a", eta=datetime(2030, 1, 1)), delayqueue.InvalidDelay),
    (lambda: jobs.record.delay_until("a", eta="2030-01-01"), delayqueue.InvalidDelay),  # type: ignore[arg-type]
    (lambda: delayqueue.enqueue("no.such.task", delay=1), delayqueue.UnknownTask),
    (lambda: delayqueue.enqueue(42, delay=1), delayqueue.UnknownTask),  # type: ignore[arg-type]
    (lambda: delayqueue.enqueue(jobs.record, delay=1, queue="has space"),
     delayqueue.InvalidQueueName),
    (lambda: delayqueue.enqueue(jobs.record, delay=1, queue="{brace}"),
     delayqueue.InvalidQueueName),
    (lambda: delayqueue.enqueue(jobs.record, "abc", delay=1), delayqueue.NotSerializable),
    (lambda: delayqueue.enqueue(jobs.record, [], [1], delay=1), delayqueue.NotSerializable),  # type: ignore[arg-type]
    (lambda: jobs.record.delay_for("a", seconds=1, key=""), delayqueue.DelayQueueError),
    (lambda: jobs.record.delay_for("a", seconds=1, key=5), delayqueue.DelayQueueError),  # type: ignore[arg-type]
    (lambda: jobs.record.delay_for("a", seconds=1, on_conflict="x"), delayqueue.DelayQueueError),  # type: ignore[arg-type]
    (lambda: jobs.record.cancel("not-an-id"), delayqueue.InvalidJobId),
    (lambda: jobs.record.cancel(), delayqueue.InvalidJobId),
    (lambda: delayqueue.cancel("bad queue", key="k"), delayqueue.InvalidQueueName),
    (lambda: jobs.record.reschedule(key="k", seconds=-5), delayqueue.InvalidDelay),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error"), BAD_CALLS)
def test_bad_input_raises_a_clear_error_and_writes_nothing(
    r: redis.Redis, call: object, error: type[Exception]
) -> None:
    with pytest.raises(error) as info:
        call()  # type: ignore[operator]
    assert str(info.value)  # a message a person can act on
    assert keys_of_the_test(r) == []


def test_errors_are_also_the_builtin_kinds() -> None:
    assert issubclass(delayqueue.InvalidDelay, ValueError)
    assert issubclass(delayqueue.NotSerializable, TypeError)
    assert issubclass(delayqueue.RedisUnavailable, ConnectionError)


def test_decorator_rejects_bad_options() -> None:
    with pytest.raises(delayqueue.InvalidQueueName):
        delayqueue.delayed_task(queue="no spaces please")
    with pytest.raises(delayqueue.DelayQueueError):
        delayqueue.delayed_task(max_attempts=0)


def test_redis_unreachable_is_a_clear_error() -> None:
    from tests.support.redis_server import free_port

    url = f"redis://:secret@127.0.0.1:{free_port()}/0"
    with override_settings(DELAYQUEUE={"REDIS_URL": url, "SOCKET_TIMEOUT": 0.5}):
        with pytest.raises(delayqueue.RedisUnavailable) as info:
            jobs.record.delay_for("a", seconds=1, on_commit=False)
        assert "secret" not in str(info.value) and "retrying is safe" in str(info.value)
    connection.reset()


def test_changed_settings_apply_to_the_next_job(r: redis.Redis) -> None:
    """spec() remembers what it checked about a task; new settings must still count."""
    first = delayqueue.enqueue("tests.support.jobs.plain", ["a"], delay=60, on_commit=False)
    base = settings.DELAYQUEUE
    with override_settings(DELAYQUEUE={**base, "MAX_ATTEMPTS": 7, "DEFAULT_QUEUE": "other"}):
        second = delayqueue.enqueue("tests.support.jobs.plain", ["b"], delay=60, on_commit=False)
        third = jobs.record.delay_for("c", seconds=60, on_commit=False)
    assert (first.queue, second.queue) == ("default", "other")
    assert stored(r, first, "default")["max"] == "5" and stored(r, second, "other")["max"] == "7"
    assert third.queue == "tests" and stored(r, third)["max"] == "3"  # the task's own win


def test_reschedule_names_the_task_of_a_job_back_from_a_failed_attempt(r: redis.Redis) -> None:
    """Such a job's spec is in its hash (claim unpacked it), not in a specs bucket."""
    job = jobs.record.delay_for("a", seconds=0, on_commit=False)
    k = queue_keys("tests")
    claimed = get_scripts().claim(
        [k.scheduled, k.inflight, k.job_prefix, k.paused, k.stats(current_minute()), k.dead,
         k.spec_prefix, k.limit_prefix, k.dedupe, k.tasks],
        [10, 60_000, STATS_TTL_SECONDS, 0],
    )[4]  # fmt: skip
    token = str(claimed[0][1])
    outcome = get_scripts().fail(
        [k.job(job.id), k.inflight, k.scheduled, k.dead, k.dedupe, k.stats(current_minute()),
         k.job_prefix],
        [job.id, token, 60_000, "ValueError: x", "tb", 5, 100, STATS_TTL_SECONDS, k.wake],
    )  # fmt: skip
    assert outcome == "retry" and not r.hexists(k.spec_bucket(job.id), job.id)
    moved = jobs.record.reschedule(job.id, seconds=5)
    assert moved is not None and moved.task == "tests.support.jobs.record"


def test_reschedule_of_a_job_whose_specs_bucket_is_corrupt_moves_it_and_returns(
    r: redis.Redis,
) -> None:
    """The job is moved before its task name is looked up: a bucket of the wrong type only
    leaves the name unknown, it does not make the call raise after the move."""
    job = jobs.record.delay_for("a", seconds=60, on_commit=False)
    k = queue_keys("tests")
    before = r.zscore(k.scheduled, job.id)
    r.delete(k.spec_bucket(job.id))
    r.set(k.spec_bucket(job.id), "not a hash")
    moved = jobs.record.reschedule(job.id, seconds=600)
    assert moved is not None and moved.id == job.id and moved.task == ""
    assert before is not None and (r.zscore(k.scheduled, job.id) or 0) > before + 500_000


@pytest.mark.django_db(transaction=True)
def test_the_transaction_check_is_djangos_in_every_kind_of_thread(r: redis.Redis) -> None:
    """delay_for reads "inside atomic()?" off the thread's connection when Django has one
    for the thread; a thread without one yet, an event loop, and an unknown database take
    Django's own look-up, with Django's answer and errors."""
    states: list[str] = []

    def in_a_new_thread() -> None:  # no connection of its own yet
        states.append(jobs.record.delay_for("thread", seconds=60).state)
        with transaction.atomic():
            states.append(jobs.record.delay_for("thread, atomic", seconds=60).state)
        connections.close_all()

    worker = threading.Thread(target=in_a_new_thread)
    worker.start()
    worker.join()
    assert states == ["scheduled", "pending"]

    async def in_an_event_loop() -> str:
        return jobs.record.delay_for("loop", seconds=60).state

    assert asyncio.run(in_an_event_loop()) == "scheduled"
    with transaction.atomic():
        assert jobs.record.delay_for("atomic", seconds=60).state == "pending"
        with pytest.raises(ConnectionDoesNotExist):
            delayqueue.enqueue(jobs.record, ("x",), delay=60, using="no-such-database")
    assert r.zcard(SCHEDULED) == 4
