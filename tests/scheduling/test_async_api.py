"""The async API (``await task.adelay_for(...)``, ``delayqueue.aenqueue`` and the rest):
the same checks, scripts, data, errors, events and durability as the sync API, on
redis.asyncio, one client set per event loop, nothing left open when a loop ends.

Runs on every topology (``DQ_TEST_TOPOLOGY=cluster`` / ``sentinel``)."""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import warnings
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings as django_settings
from django.db import transaction
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone
from prometheus_client import REGISTRY

import delayqueue
from delayqueue.engine import async_clients
from delayqueue.engine import clients as connection
from delayqueue.engine.async_clients import loop_clients
from delayqueue.engine.clients import redis_now_ms
from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.engine.shards import shard_for, shard_names
from delayqueue.signals import job_scheduled
from orders_demo.models import Product
from tests.support import jobs
from tests.support.data_redis import TOPOLOGY, command_calls, only_on
from tests.support.stored import stored_job

T = TypeVar("T")
Q = queue_keys("tests")


def run(coroutine: Awaitable[T]) -> T:
    async def main() -> T:
        return await coroutine

    return asyncio.run(main())


def _sockets() -> int:
    """Sockets this process has open."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


# ---- the same jobs, data and handles --------------------------------------------------------


def test_adelay_for_writes_what_delay_for_writes(r: redis.Redis) -> None:
    before = redis_now_ms(r)
    sync_job = jobs.record.delay_for("a", 7, seconds=30, on_commit=False)
    job = run(jobs.record.adelay_for("a", 7, seconds=30))
    after = redis_now_ms(r)
    assert job.state == "scheduled" and job.outcome == "created" and job.queue == "tests"
    assert job.task == sync_job.task == "tests.support.jobs.record"
    score = r.zscore(Q.scheduled, job.id)
    assert score is not None and before + 30_000 <= score <= after + 30_000
    assert job.due_at is not None and abs(job.due_at.timestamp() * 1000 - score) < 1
    mine, theirs = stored_job(r, Q, job.id), stored_job(r, Q, sync_job.id)
    assert mine.keys() == theirs.keys() and mine["task"] == theirs["task"]
    assert mine["args"] == theirs["args"] and mine.get("max_attempts") == theirs.get("max_attempts")
    assert "tests" in r.smembers(global_keys().queues)


def test_each_async_call_and_its_sync_twin(r: redis.Redis) -> None:
    eta = timezone.now() + timedelta(minutes=5)

    async def calls() -> None:
        at = await jobs.record.adelay_until("u", eta=eta, key="u")
        assert abs(at.due_at.timestamp() - eta.timestamp()) < 0.002  # type: ignore[union-attr]
        kept = await jobs.record.adelay_until("u2", eta=eta, key="u")
        assert kept.outcome == "kept" and kept.id == at.id
        replaced = await delayqueue.aenqueue(
            jobs.record, ("u3",), delay=60, key="u", on_conflict="replace"
        )
        assert replaced.outcome == "replaced" and replaced.id == at.id
        moved = await jobs.record.areschedule(key="u", minutes=10)
        assert moved is not None and moved.id == at.id and moved.task == "tests.support.jobs.record"
        assert moved.key == "u" and moved.state == "scheduled"
        by_id = await delayqueue.areschedule("tests", at.id, delay=timedelta(hours=1))
        assert by_id is not None and by_id.id == at.id
        assert await jobs.record.areschedule("01ARZ3NDEKTSV4RRFFQ69G5FAV", seconds=1) is None
        made = await jobs.record.adelay_many([("m1",), ("m2",), ("m3",)], seconds=60)
        assert [j.state for j in made] == ["scheduled"] * 3
        specs = [delayqueue.spec(jobs.record, (i,), delay=60) for i in range(3)]
        assert len(await delayqueue.adelay_many(specs)) == 3
        assert await jobs.record.acancel(key="u") is True
        assert await jobs.record.acancel(key="u") is False
        assert await made[0].acancel() is True
        assert await delayqueue.acancel("tests", made[1].id) is True
        assert await jobs.record.acancel(made[2].id) is True

    run(calls())
    assert r.zcard(Q.scheduled) == 3  # the three of adelay_many(specs)
    assert r.hget(Q.dedupe, "u") is None


def test_adelay_many_is_one_round_trip(r: redis.Redis) -> None:
    async def calls() -> int:
        await jobs.record.adelay_for("warm", seconds=60)  # scripts loaded, queue known
        before = command_calls(r, "evalsha", "eval")
        await jobs.record.adelay_many([(i,) for i in range(50)], seconds=60)
        return command_calls(r, "evalsha", "eval") - before

    assert run(calls()) == 1
    assert r.zcard(Q.scheduled) == 51


@pytest.mark.parametrize("many", [False, True])
def test_a_script_redis_lost_is_loaded_again(r: redis.Redis, many: bool) -> None:
    async def calls() -> None:
        await jobs.record.adelay_for("warm", seconds=60)
        await (await loop_clients()).client.script_flush()
        if many:
            await jobs.record.adelay_many([("a",), ("b",)], seconds=60)
        else:
            await jobs.record.adelay_for("a", seconds=60)
        assert await jobs.record.acancel(key="nope") is False

    run(calls())
    assert r.zcard(Q.scheduled) == (3 if many else 2)


def test_a_sharded_queue_routes_as_the_sync_api_does(r: redis.Redis) -> None:
    async def calls() -> None:
        keyed = await jobs.sharded.adelay_for("k", seconds=60, key="order-7")
        assert keyed.queue == shard_for("sharded", "order-7")
        made = await jobs.sharded.adelay_many([(i,) for i in range(40)], seconds=60)
        assert len({j.queue for j in made}) > 1
        assert await jobs.sharded.areschedule(key="order-7", seconds=90) is not None
        assert await jobs.sharded.acancel(key="order-7") is True
        assert all([await jobs.sharded.acancel(j.id) for j in made])  # every shard asked

    run(calls())
    assert sum(r.zcard(queue_keys(shard).scheduled) for shard in shard_names("sharded")) == 0


# ---- the same errors ---------------------------------------------------------------------


class Thing:
    pass


NAIVE = datetime(2030, 1, 1, 12, 0)
R = jobs.record
# (sync call, its async twin, args, kwargs): each bad in its own way
BAD: list[
    tuple[Callable[..., Any], Callable[..., Awaitable[Any]], tuple[Any, ...], dict[str, Any]]
] = [
    (R.delay_for, R.adelay_for, (Thing(),), {"seconds": 1}),
    (R.delay_for, R.adelay_for, ("a",), {"seconds": -1}),
    (R.delay_for, R.adelay_for, ("a",), {"seconds": 1, "key": ""}),
    (R.delay_for, R.adelay_for, ("a",), {"seconds": 1, "durable": "yes"}),
    (R.delay_until, R.adelay_until, ("a",), {"eta": NAIVE}),
    (delayqueue.enqueue, delayqueue.aenqueue, ("no.such.task",), {"delay": 1}),
    (delayqueue.enqueue, delayqueue.aenqueue, (R, ("a",)), {"delay": 1, "queue": "bad queue"}),
    (R.delay_many, R.adelay_many, ([{"a": 1}],), {"seconds": 1}),
    (delayqueue.delay_many, delayqueue.adelay_many, (["x"],), {}),
    (R.cancel, R.acancel, (), {}),
    (R.cancel, R.acancel, ("not-an-id",), {}),
    (delayqueue.cancel, delayqueue.acancel, ("tests",), {"key": "k", "durable": 1}),
    (R.reschedule, R.areschedule, (), {"key": "k"}),
    (delayqueue.reschedule, delayqueue.areschedule, ("a b",), {"key": "k", "delay": 1}),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_input_raises_the_sync_apis_error_and_writes_nothing(
    r: redis.Redis, index: int
) -> None:
    call_sync, call_async, args, kwargs = BAD[index]
    with pytest.raises(delayqueue.DelayQueueError) as sync_error:
        call_sync(*args, **kwargs)
    with pytest.raises(delayqueue.DelayQueueError) as async_error:
        run(call_async(*args, **kwargs))
    assert type(async_error.value) is type(sync_error.value)
    said = str(async_error.value).replace("adelay_many()", "delay_many()")  # (its own name)
    assert said == str(sync_error.value)
    assert r.zcard(Q.scheduled) == 0


def test_redis_unreachable_is_redis_unavailable() -> None:
    from tests.support.redis_server import free_port

    url = f"redis://:secret@127.0.0.1:{free_port()}/0"
    with override_settings(DELAYQUEUE={"REDIS_URL": url, "SOCKET_TIMEOUT": 0.5}):
        for call in (
            lambda: jobs.record.adelay_for("a", seconds=1),
            lambda: jobs.record.adelay_many([("a",), ("b",)], seconds=1),
            lambda: jobs.record.acancel(key="k"),
            lambda: jobs.record.areschedule(key="k", seconds=1),
        ):
            with pytest.raises(delayqueue.RedisUnavailable) as info:
                run(call())
            assert "secret" not in str(info.value) and "retrying is safe" in str(info.value)
    connection.reset()


# ---- durable --------------------------------------------------------------------------------


@only_on("single")
def test_without_a_replica_a_durable_call_says_not_durable(r: redis.Redis, settings: Any) -> None:
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "DURABLE_TIMEOUT": 0.2}
    with pytest.raises(delayqueue.NotDurable) as caught:
        run(jobs.record.adelay_for("x", seconds=60, durable=True))
    assert "0 of 1 replicas" in str(caught.value)
    with pytest.raises(delayqueue.NotDurable):
        run(jobs.durable_record.adelay_for("y", seconds=60))  # the task's durable=True
    with pytest.raises(delayqueue.NotDurable):
        run(jobs.record.adelay_many([("m",), ("n",)], seconds=60, durable=True))
    run(jobs.durable_record.adelay_for("z", seconds=60, durable=False))
    assert r.zcard(Q.scheduled) == 5  # written all the same


@only_on("cluster", "sentinel")
def test_with_a_replica_a_durable_call_waits_for_it(r: redis.Redis) -> None:
    async def calls() -> None:
        await jobs.record.adelay_for("warm", seconds=60)
        await jobs.record.adelay_many([("w1",), ("w2",)], seconds=60)  # scripts on the masters
        await jobs.record.acancel(key="warm-none")  # (a script Redis lacks is sent twice)
        before = command_calls(r, "wait")
        await jobs.record.adelay_for("x", seconds=60, durable=True, key="x")
        await jobs.record.adelay_many([("a",), ("b",)], seconds=60, durable=True)
        assert await jobs.record.acancel(key="x", durable=True) is True
        assert command_calls(r, "wait") == before + 3

    run(calls())


# ---- the same events --------------------------------------------------------------------


def test_signals_and_log_lines_are_the_sync_apis(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[dict[str, Any]] = []

    def receiver(sender: Any, **kwargs: Any) -> None:
        seen.append(kwargs)

    job_scheduled.connect(receiver)
    try:
        with caplog.at_level("INFO", logger="delayqueue.jobs"):
            run(jobs.record.adelay_for("a", seconds=60, key="a"))
            run(jobs.record.areschedule(key="a", seconds=90))
            run(jobs.record.acancel(key="a"))
            jobs.record.delay_for("b", seconds=60, key="b", on_commit=False)
            jobs.record.reschedule(key="b", seconds=90)
            jobs.record.cancel(key="b")
    finally:
        job_scheduled.disconnect(receiver)
    transitions = [getattr(rec, "transition", "") for rec in caplog.records]
    assert transitions == ["scheduled", "rescheduled", "cancelled"] * 2
    assert [s["key"] for s in seen] == ["a", "b"]
    assert {k for k in seen[0]} == {k for k in seen[1]}


@pytest.mark.django_db
def test_the_admin_and_metrics_see_an_async_job_as_a_sync_one(
    r: redis.Redis, admin_client: Any
) -> None:
    import delayqueue.observability.metrics  # noqa: F401  (its receivers count the jobs)
    from delayqueue.services import browse

    def scheduled_total() -> float:
        value = REGISTRY.get_sample_value("delayqueue_jobs_scheduled_total", {"queue": "tests"})
        return value or 0.0

    before = scheduled_total()
    made_async = run(jobs.record.adelay_for("same", seconds=60, key="k-async"))
    made_sync = jobs.record.delay_for("same", seconds=60, key="k-sync",
                                      on_commit=False)  # fmt: skip
    assert scheduled_total() - before == 2
    listed = admin_client.get(
        reverse("admin:delayqueue_delayedjob_list", args=["tests", "scheduled"])
    )
    assert listed.status_code == 200
    assert made_async.id in listed.content.decode() and made_sync.id in listed.content.decode()
    rows = {row.id: row for row in browse.job_page("tests", "scheduled").rows}
    shown = [
        (row.task, row.args_preview, row.attempts, row.max_attempts, row.missing)
        for row in (rows[made_async.id], rows[made_sync.id])
    ]
    assert shown[0] == shown[1] == ("tests.support.jobs.record", '["same"]', 0, 3, False)
    for job in (made_async, made_sync):
        page = admin_client.get(reverse("admin:delayqueue_delayedjob_job", args=["tests", job.id]))
        assert page.status_code == 200 and job.key in page.content.decode()


# ---- on_commit ------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_on_commit_in_async_code_writes_at_once(r: redis.Redis) -> None:
    assert run(jobs.record.adelay_for("a", seconds=60)).state == "scheduled"
    assert r.zcard(Q.scheduled) == 1


@pytest.mark.django_db(transaction=True)
def test_a_sync_transaction_is_not_the_async_codes(r: redis.Redis) -> None:
    """Django keeps atomic() per sync thread; a coroutine started inside one (asyncio.run,
    async_to_sync) sees a connection of its own outside any transaction, so the async call
    writes at once, as documented; the sync API in the same block waits for the commit."""
    with pytest.raises(RuntimeError), transaction.atomic():
        written = run(jobs.record.adelay_for("a", seconds=60))
        also = async_to_sync(jobs.record.adelay_many)([("m",)], seconds=60)
        pending = jobs.record.delay_for("sync", seconds=60)
        assert written.state == "scheduled" and also[0].state == "scheduled"
        assert pending.state == "pending" and r.zcard(Q.scheduled) == 2
        raise RuntimeError("rollback")
    assert r.zcard(Q.scheduled) == 2 and r.zscore(Q.scheduled, pending.id) is None


@pytest.mark.django_db(transaction=True)
def test_an_async_view_with_an_atomic_block_in_sync_to_async(r: redis.Redis) -> None:
    """The documented pattern: rows and their jobs in one sync_to_async transaction (the
    jobs written at its commit, never on rollback), later jobs through the async API."""
    seen_inside: list[int] = []

    def place_order(fail: bool) -> tuple[int, delayqueue.Job]:
        with transaction.atomic():
            name = "failed" if fail else "placed"
            product = Product.objects.create(name=name, price=Decimal("1.00"), stock=1)
            job = jobs.record.delay_for(product.pk, seconds=60)
            seen_inside.append(int(r.zcard(Q.scheduled)))
            if fail:
                raise RuntimeError("rollback")
        return product.pk, job

    async def view(fail: bool) -> tuple[delayqueue.Job, delayqueue.Job | None]:
        try:
            pk, job = await sync_to_async(place_order)(fail)
        except RuntimeError:
            return await jobs.record.adelay_for("after a rollback", seconds=60), None
        return job, await jobs.record.adelay_for(pk, seconds=120)

    first, second = async_to_sync(view)(False)
    assert seen_inside == [0] and first.state == "scheduled" and second is not None
    assert r.zscore(Q.scheduled, first.id) is not None and second.state == "scheduled"
    after, none = async_to_sync(view)(True)
    assert none is None and seen_inside == [0, 2] and r.zcard(Q.scheduled) == 3
    assert list(
        Product.objects.filter(name__in=["placed", "failed"]).values_list("name", flat=True)
    ) == ["placed"]


# ---- one client set per loop, none left open -------------------------------------------------


def test_many_loops_leave_no_connection_and_no_entry(r: redis.Redis) -> None:
    async def one_request(i: int) -> None:
        await asyncio.gather(*(jobs.record.adelay_for(i, n, seconds=60) for n in range(3)))
        assert await jobs.record.acancel(key=f"none-{i}") is False

    async_to_sync(one_request)(-1)  # the first makes what every loop reuses (modules, TLS)
    gc.collect()
    before = _sockets()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(30):
            async_to_sync(one_request)(i)
            run(one_request(100 + i))
        gc.collect()
    assert _sockets() == before
    assert len(async_clients._by_loop) == 0
    assert r.zcard(Q.scheduled) == 3 * 61


def test_each_loop_has_its_own_clients_and_loops_in_threads_run_at_once(r: redis.Redis) -> None:
    made: list[object] = []
    errors: list[BaseException] = []
    ready = threading.Barrier(4)

    async def in_a_loop(tag: str) -> None:
        made.append(await loop_clients())
        ready.wait(10)  # every loop holds its clients at the same time
        await asyncio.gather(*(jobs.record.adelay_for(tag, i, seconds=60) for i in range(25)))

    def thread(tag: str) -> None:
        try:
            asyncio.run(in_a_loop(tag))
        except BaseException as exc:  # noqa: B036  (reported by the test below)
            errors.append(exc)

    threads = [threading.Thread(target=thread, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == []
    assert len({id(m) for m in made}) == 4
    assert r.zcard(Q.scheduled) == 100


def test_settings_changed_give_the_loop_new_clients(r: redis.Redis) -> None:
    async def calls() -> None:
        first = await loop_clients()
        await jobs.record.adelay_for("a", seconds=60)
        connection.reset()  # what a setting_changed does
        await jobs.record.adelay_for("b", seconds=60)
        second = await loop_clients()
        assert second is not first and first.closed

    run(calls())
    assert r.zcard(Q.scheduled) == 2


@only_on("single")
def test_a_forked_child_makes_its_own_clients_and_leaves_the_parents(r: redis.Redis) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(jobs.record.adelay_for("parent", seconds=60))
        parents = loop.run_until_complete(loop_clients())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # (a threaded parent: 3.12+)
            pid = os.fork()
        if pid == 0:  # the child: the same loop object, its own connection
            code = 1
            try:
                job = loop.run_until_complete(jobs.record.adelay_for("child", seconds=60))
                mine = loop.run_until_complete(loop_clients())
                code = 0 if job.state == "scheduled" and mine is not parents else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # the parent's connection is as it was: its next call works on it
        loop.run_until_complete(jobs.record.adelay_for("parent again", seconds=60))
        assert loop.run_until_complete(loop_clients()) is parents
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
    assert parents.closed and r.zcard(Q.scheduled) == 3


def test_the_event_loop_is_free_while_redis_is_slow(r: redis.Redis) -> None:
    """A coroutine waiting on Redis leaves the loop to the others (a sync call would hold
    it): while the server is paused for writes, a ticker on the same loop keeps ticking.
    Redis stays paused until the ticker has ticked (30 s at most), so a slow machine only
    makes the test wait longer; a call that held the loop would keep the ticker still until
    the pause ran out, its write done first."""

    async def main() -> tuple[int, bool, bool]:
        await jobs.record.adelay_for("warm", seconds=60)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        pauser = redis.Redis.from_url(os.environ["REDIS_URL"]) if TOPOLOGY != "cluster" else None
        clients = [pauser] if pauser is not None else []
        if TOPOLOGY == "cluster":
            clients = [
                redis.Redis(host=n.host, port=n.port)
                for n in r.get_primaries()  # type: ignore[attr-defined]
            ]
        for c in clients:
            c.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")
        try:
            write = asyncio.ensure_future(jobs.record.adelay_for("paused", seconds=60))
            tick = asyncio.ensure_future(ticker())
            while ticks < 10 and not write.done():
                await asyncio.sleep(0.01)
            ticked_while_waiting = not write.done()
            await asyncio.sleep(0.3)
            still_waiting = not write.done()  # (the pause holds it: it did reach Redis)
        finally:
            for c in clients:
                c.execute_command("CLIENT", "UNPAUSE")
                c.close()
        await write
        tick.cancel()
        return ticks, ticked_while_waiting, still_waiting

    ticks, ticked_while_waiting, still_waiting = run(main())
    assert still_waiting  # the write did wait for the pause
    assert ticked_while_waiting and ticks >= 10  # and the loop ran the ticker meanwhile


# ---- the loop's shared connection (engine/async_direct.py) ----------------------------------


@only_on("single")
def test_a_shared_connection_redis_dropped_is_replaced_and_the_call_sent_again(
    r: redis.Redis,
) -> None:
    async def calls() -> None:
        await jobs.record.adelay_for("first", seconds=60)
        clients = await loop_clients()
        assert clients.direct is not None  # the single server's client shares one
        r.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        made = await asyncio.gather(*(jobs.record.adelay_for(i, seconds=60) for i in range(20)))
        assert [job.state for job in made] == ["scheduled"] * 20

    run(calls())
    assert r.zcard(Q.scheduled) == 21


@only_on("single")
def test_no_reply_within_the_socket_timeout_is_redis_unavailable(
    r: redis.Redis, settings: Any
) -> None:
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "SOCKET_TIMEOUT": 0.3}

    async def calls() -> float:
        await jobs.record.adelay_for("warm", seconds=60)
        r.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        started = asyncio.get_running_loop().time()
        try:
            with pytest.raises(delayqueue.RedisUnavailable, match="Timeout"):
                await jobs.record.adelay_for("paused", seconds=60)
            return asyncio.get_running_loop().time() - started
        finally:
            r.execute_command("CLIENT", "UNPAUSE")

    waited = run(calls())
    assert 0.25 <= waited < 2.0  # the socket timeout, not the pause
    assert run(jobs.record.adelay_for("after", seconds=60)).state == "scheduled"


@only_on("single")
def test_tls_and_an_acl_user(tmp_path: Any) -> None:
    """rediss:// with a CA of the test's own and a user with only docs/redis-acl.md's
    commands: the async calls connect, authenticate and run their scripts as the sync ones."""
    from tests.support.redis_server import RedisServer, free_port

    ca, cert, key = _certificates(tmp_path)
    tls_port = free_port()
    server = RedisServer(
        extra=["--tls-port", str(tls_port), "--tls-cert-file", str(cert),
               "--tls-key-file", str(key), "--tls-ca-cert-file", str(ca),
               "--tls-auth-clients", "no"]
    ).start()  # fmt: skip
    try:
        admin = server.client()
        admin.execute_command(
            "ACL", "SETUSER", "dq", "reset", "on", ">pw", "~dq:*", "&dq:*", *ACL_COMMANDS.split()
        )
        url = f"rediss://dq:pw@localhost:{tls_port}/0?ssl_ca_certs={ca}"
        with override_settings(DELAYQUEUE={**django_settings.DELAYQUEUE, "REDIS_URL": url}):

            async def calls() -> None:
                job = await jobs.record.adelay_for("tls", seconds=60, key="k")
                assert (await jobs.record.areschedule(key="k", seconds=90)) is not None
                made = await jobs.record.adelay_many([("a",), ("b",)], seconds=60)
                assert await made[0].acancel() and await jobs.record.acancel(key="k")
                assert job.state == "scheduled"

            run(calls())
        assert admin.zcard(Q.scheduled) == 1
        assert admin.execute_command("ACL", "LOG") == []  # nothing refused
        admin.close()
    finally:
        connection.reset()
        server.cleanup()


# The minimal command set of docs/redis-acl.md (library, delay worker, Celery side).
ACL_COMMANDS = (
    "+ping +evalsha +script|load +time "
    "+hget +hmget +hset +hsetnx +hdel +hincrby "
    "+zadd +zrem +zrange +zrangebyscore +zremrangebyscore +zscore +zcard +zpopmin "
    "+del +exists +expire +type +get +sadd +smembers +publish +subscribe +hgetall"
)


def _certificates(folder: Any) -> tuple[Any, Any, Any]:
    """A CA and a localhost certificate it signed (what Python 3.13's strict checks ask)."""
    import subprocess

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    ca, ca_key, key, csr, cert = (
        folder / n for n in ("ca.crt", "ca.key", "s.key", "s.csr", "s.crt")
    )
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    openssl("req", "-x509", *ec, "-keyout", str(ca_key), "-out", str(ca), "-days", "1",
            "-subj", "/CN=dq async test CA", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")  # fmt: skip
    openssl("req", *ec, "-keyout", str(key), "-out", str(csr), "-subj", "/CN=localhost")
    ext = folder / "san.ext"
    ext.write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nauthorityKeyIdentifier=keyid,issuer\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return ca, cert, key
