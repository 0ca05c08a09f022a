"""Redis Sentinel: delayqueue on ``sentinel://`` against a real Sentinel set of its own
(tests/support/topologies.py): the client API, the delay worker and its wake channel, the direct
path, a failover with the same client, the system checks and the redaction of the URL."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from django.core.checks import run_checks
from django.test import override_settings
from redis.sentinel import SentinelConnectionPool

import delayqueue
from delayqueue.engine import direct as direct_path
from delayqueue.engine import execution, sentinel, transitions
from delayqueue.engine.clients import get_redis
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.sentinel import parse_sentinel_url
from delayqueue.errors import DelayQueueError, InvalidOption, RedisUnavailable
from delayqueue.redaction import redact_url
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.redis_server import free_port
from tests.support.topologies import MASTER_NAME, SentinelSet
from tests.support.waiting import wait_for

Q = queue_keys("tests")
SOCKET_TIMEOUT = 2.0


def point_delayqueue_at(sentinel_set: SentinelSet, settings: Any) -> redis.Redis:
    """DELAYQUEUE on the Sentinel set (its master emptied first); a plain client of the
    master the sentinels name, to look at what delayqueue wrote."""
    master = sentinel_set.master_client()
    master.flushall()  # a server this module started (tests/support/topologies.py)
    settings.DELAYQUEUE = {
        **settings.DELAYQUEUE,
        "REDIS_URL": sentinel_set.url,
        "SENTINEL_MASTER": MASTER_NAME,
        "SOCKET_TIMEOUT": SOCKET_TIMEOUT,
    }
    return master


@pytest.fixture
def master(sentinel_set: SentinelSet, settings: Any) -> Iterator[redis.Redis]:
    client = point_delayqueue_at(sentinel_set, settings)
    yield client
    client.close()


def _address(client: redis.Redis) -> tuple[str, int]:
    kwargs = client.connection_pool.connection_kwargs
    return str(kwargs["host"]), int(kwargs["port"])


# ---- the client API, the worker, the direct path, the wake channel ----------------------------


def test_delay_for_cancel_and_reschedule_land_on_the_master_the_sentinels_name(
    master: redis.Redis, r: redis.Redis, sentinel_set: SentinelSet
) -> None:
    job = jobs.record.delay_for("a", hours=1, key="order:1", on_commit=False)
    other = delayqueue.enqueue(jobs.record, ("b",), delay=3600, on_commit=False)
    assert master.zscore(Q.scheduled, job.id) is not None
    assert master.zscore(Q.scheduled, other.id) is not None
    assert r.zcard(Q.scheduled) == 0  # not the suite's own Redis (the default REDIS_URL)
    # the client delayqueue made is a Sentinel-managed one, and it found this master
    client = get_redis()
    assert isinstance(client, sentinel.SentinelRedis)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.get_master_address() == ("127.0.0.1", _address(master)[1])

    moved = jobs.record.reschedule(key="order:1", seconds=5)
    assert moved is not None and moved.id == job.id
    score = master.zscore(Q.scheduled, job.id)
    assert score is not None and score < job.due_at.timestamp() * 1000  # type: ignore[union-attr]
    assert jobs.record.cancel(key="order:1") is True
    assert master.zscore(Q.scheduled, job.id) is None
    assert other.cancel() is True and master.zcard(Q.scheduled) == 0


def test_the_direct_path_runs_on_the_master_and_reloads_a_lost_script(
    master: redis.Redis, sentinel_set: SentinelSet
) -> None:
    first = jobs.record.delay_for("first", seconds=60, on_commit=False)
    assert direct_path.connections.made is not None
    (idle,) = direct_path.connections.made._idle
    link = idle.connection
    assert (link.host, link.port) == ("127.0.0.1", _address(master)[1])  # type: ignore[attr-defined]
    master.script_flush()  # NOSCRIPT: loaded again on the same connection
    second = jobs.record.delay_for("second", seconds=60, on_commit=False)
    assert {first.id, second.id} == set(master.zrange(Q.scheduled, 0, -1))


def test_a_direct_connection_on_a_demoted_master_reconnects_to_the_master(
    master: redis.Redis, sentinel_set: SentinelSet
) -> None:
    """A server that answers READONLY (the old master, demoted) is left for the master the
    sentinels name; the call is sent there and the job is not lost."""
    jobs.record.delay_for("warm up", seconds=60, on_commit=False)
    assert direct_path.connections.made is not None
    (idle,) = direct_path.connections.made._idle
    connection = idle.connection
    replica = next(s for s in sentinel_set.servers if s is not sentinel_set.master)
    connection.disconnect()
    connection.connect_to(("127.0.0.1", replica.port))  # type: ignore[attr-defined]
    job = jobs.record.delay_for("after READONLY", seconds=60, on_commit=False)
    assert master.zscore(Q.scheduled, job.id) is not None
    (idle,) = direct_path.connections.made._idle
    assert idle.connection.port == _address(master)[1]  # type: ignore[attr-defined]


def test_a_worker_pass_claims_and_dispatches_through_sentinel(
    master: redis.Redis, parked_celery: Celery
) -> None:
    due = [jobs.record.delay_for(f"now {i}", seconds=0, on_commit=False) for i in range(3)]
    later = jobs.record.delay_for("later", seconds=30, on_commit=False)
    result = DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    assert sorted(job.id for job in result.claimed) == sorted(job.id for job in due)
    assert master.zcard(Q.inflight) == 3
    assert master.zscore(Q.scheduled, later.id) is not None


def test_the_wake_channel_wakes_a_sleeping_worker_through_sentinel(
    master: redis.Redis, parked_celery: Celery
) -> None:
    worker = DelayWorker(["tests"], celery_app=parked_celery)
    worker._refresh_queues()  # subscribes to the queue's wake channel
    assert worker.wake.listening
    threading.Timer(0.3, lambda: jobs.record.delay_for("wake", seconds=0, on_commit=False)).start()
    started = time.monotonic()
    worker._sleep(10.0)
    assert time.monotonic() - started < 3.0  # woken by the message, not the 10 s timeout
    assert worker.wake.port == _address(master)[1]
    assert len(worker.run_pass().claimed) == 1


def test_a_celery_broker_on_sentinel_receives_the_dispatch(
    master: redis.Redis, sentinel_set: SentinelSet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Celery's own broker on the same Sentinel set (kombu's sentinel:// with master_name):
    the worker's fast path writes the message onto the master's list through kombu's
    sentinel-managed client, a message Celery reads as its own."""
    import json

    from delayqueue.worker.publisher_choice import RedisListPublisher
    from tests.support.celery_apps import celery_app_on

    monkeypatch.delenv("CELERY_BROKER_URL")
    app = celery_app_on(sentinel_set.url_for(1))
    app.conf.broker_transport_options = {"master_name": MASTER_NAME}
    job = jobs.record.delay_for("to celery", seconds=0, on_commit=False)
    worker = DelayWorker(["tests"], celery_app=app)
    assert isinstance(worker.dispatcher.publisher, RedisListPublisher)
    result = worker.run_pass()
    assert [claimed.id for claimed in result.claimed] == [job.id]
    with redis.Redis(port=_address(master)[1], db=1) as broker:
        [raw] = broker.lrange("celery", 0, -1)
        broker.delete("celery")
    message = json.loads(raw)
    assert message["headers"]["task"] == "tests.support.jobs.record"
    assert message["headers"]["dq_id"] == job.id


def test_credentials_for_the_master_in_the_url_and_for_the_sentinels_in_their_options(
    settings: Any,
) -> None:
    """kombu's split: the URL's user and password are the master's, SENTINEL_KWARGS holds the
    sentinels' own; neither password shows in an error."""
    with SentinelSet(sentinel_password="sentinel-secret-1") as sentinel_set:
        master = point_delayqueue_at(sentinel_set, settings)
        master.execute_command(
            "ACL", "SETUSER", "dq", "reset", "on", ">master-secret-2", "~dq:*", "&dq:*", "+@all"
        )
        for sentinel in sentinel_set.sentinels:  # docs/topologies.md: the least a client needs
            with sentinel.client() as on_sentinel:
                on_sentinel.execute_command(
                    "ACL", "SETUSER", "dq-sentinel", "reset", "on", ">sentinel-secret-3",
                    "+sentinel|masters",
                )  # fmt: skip
        first, rest = sentinel_set.url.split(";", 1)
        url = first.replace("sentinel://", "sentinel://dq:master-secret-2@") + ";" + rest
        settings.DELAYQUEUE = {
            **settings.DELAYQUEUE,
            "REDIS_URL": url,
            "SENTINEL_KWARGS": {"username": "dq-sentinel", "password": "sentinel-secret-3"},
        }
        job = jobs.record.delay_for("authenticated", seconds=60, on_commit=False)
        assert master.zscore(Q.scheduled, job.id) is not None
        users = {entry["user"] for entry in master.client_list()}
        assert "dq" in users  # delayqueue's connections logged in with the URL's user
        for sentinel in sentinel_set.sentinels:
            with sentinel.client() as on_sentinel:
                refused = on_sentinel.execute_command("ACL", "LOG")
            assert not [e for e in refused if b"dq-sentinel" in repr(e).encode()], refused

        settings.DELAYQUEUE = {**settings.DELAYQUEUE, "SENTINEL_KWARGS": None}
        with pytest.raises(RedisUnavailable) as error:
            jobs.record.delay_for("sentinels refuse", seconds=60, on_commit=False)
        assert "No master found" in str(error.value)
        assert "secret" not in str(error.value)
        master.close()


# ---- failover -----------------------------------------------------------------------------


def test_failover_keeps_acknowledged_jobs_and_the_same_client_recovers(
    settings: Any, parked_celery: Celery, capsys: pytest.CaptureFixture[str]
) -> None:
    """Jobs the replica acknowledged (WAIT) survive a SIGKILL of the master; the client made
    before the failover, never reset, writes to the promoted replica within seconds, and
    what a caller sees meanwhile is delayqueue's RedisUnavailable, each call within
    SOCKET_TIMEOUT."""
    with SentinelSet() as sentinel_set:
        old_master = point_delayqueue_at(sentinel_set, settings)
        written = [jobs.record.delay_for(i, seconds=0, on_commit=False) for i in range(20)]
        # Replication is asynchronous: a write of this connection, then WAIT for the replica
        # to acknowledge it (and so everything before it), separates that from this test.
        old_master.set("test:marker", "1")
        assert old_master.execute_command("WAIT", 1, 1000) == 1
        replica = next(s for s in sentinel_set.servers if s is not sentinel_set.master)
        with replica.client() as on_replica:
            assert on_replica.zcard(Q.scheduled) == 20
        old_master.close()
        get_redis().ping()  # a pooled connection to the old master, besides the direct one

        sentinel_set.kill_master_only()
        started = time.monotonic()
        promoted: list[float] = []
        thread = threading.Thread(
            target=lambda: promoted.append(sentinel_set.wait_for_failover()[1])
        )
        thread.start()
        errors: list[tuple[float, float, DelayQueueError]] = []
        after = None
        while time.monotonic() - started < 30:
            call = time.monotonic()
            try:
                after = jobs.record.delay_for("after", seconds=0, on_commit=False)
                break
            except DelayQueueError as exc:  # nothing else may come out: not redis-py's, no hang
                errors.append((call - started, time.monotonic() - call, exc))
                time.sleep(0.05)
        recovered = time.monotonic() - started
        thread.join()
        assert after is not None, errors[-1:]
        assert all(isinstance(exc, RedisUnavailable) for _, _, exc in errors), errors
        assert max((took for _, took, _ in errors), default=0) < SOCKET_TIMEOUT + 0.5
        assert recovered < 15

        new_master = sentinel_set.master_client()
        assert new_master.info("server")["tcp_port"] == replica.port
        assert new_master.zcard(Q.scheduled) == 21
        on_new = set(new_master.zrange(Q.scheduled, 0, -1))
        assert on_new == {job.id for job in written} | {after.id}

        claimed = wait_for(lambda: _claim(parked_celery), timeout=10, interval=0.2)
        assert len(claimed) == 21 and new_master.zcard(Q.inflight) == 21
        new_master.close()
        with capsys.disabled():
            kinds = sorted({_reason(exc) for _, _, exc in errors})
            print(
                f"\nSentinel failover: promoted {promoted[0]:.2f} s after the SIGKILL; "
                f"delay_for failed {len(errors)} times over {recovered:.2f} s (longest call "
                f"{max((t for _, t, _ in errors), default=0):.3f} s): {kinds}"
            )


def _reason(exc: Exception) -> str:
    """What redis-py said, inside RedisUnavailable's "did not answer (...)"."""
    text = str(exc)
    return text.partition("did not answer (")[2].rpartition("); nothing")[0] or text


def _claim(app: Celery) -> list[Any]:
    """One worker pass; its claims, or [] when Redis failed it (the loop would retry)."""
    worker = DelayWorker(["tests"], claim_size=100, celery_app=app)
    try:
        return list(worker.run_pass().claimed)
    except DelayQueueError:
        return []


# ---- settings: checks, errors, redaction --------------------------------------------------


def check_ids(**delayqueue_settings: Any) -> set[str]:
    with override_settings(DELAYQUEUE=delayqueue_settings):
        return {m.id for m in run_checks() if m.id and m.id.startswith("delayqueue.")}


GOOD = "sentinel://:pw@127.0.0.1:26379;sentinel://127.0.0.1:26380/0"


def test_good_sentinel_settings_pass() -> None:
    assert check_ids(REDIS_URL=GOOD, SENTINEL_MASTER="mymaster") == set()
    assert (
        check_ids(REDIS_URL=GOOD, SENTINEL_MASTER="mymaster", SENTINEL_KWARGS={"password": "x"})
        == set()
    )


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"REDIS_URL": GOOD}, "delayqueue.E008"),
        ({"REDIS_URL": GOOD, "SENTINEL_MASTER": ""}, "delayqueue.E008"),
        ({"REDIS_URL": GOOD, "SENTINEL_MASTER": 3}, "delayqueue.E008"),
        ({"REDIS_URL": GOOD, "SENTINEL_MASTER": "m", "SENTINEL_KWARGS": []}, "delayqueue.E010"),
        (
            {"REDIS_URL": GOOD, "SENTINEL_MASTER": "m", "SENTINEL_KWARGS": {"passwrd": "x"}},
            "delayqueue.E010",
        ),
        (
            {"REDIS_URL": "sentinel://h/0?auth_token=abc;sentinel://h2", "SENTINEL_MASTER": "m"},
            "delayqueue.E007",
        ),
        ({"REDIS_URL": "redis://x", "SENTINEL_MASTER": "m"}, "delayqueue.W003"),
    ],
)
def test_each_sentinel_check_fires(given: dict[str, Any], expected: str) -> None:
    ids = check_ids(**given)
    assert expected in ids, ids
    assert len(ids) == 1, ids  # one message per mistake


@pytest.mark.parametrize(
    "url",
    [
        "sentinel://",
        "sentinel://:pw@/0",
        "sentinel://h:x;sentinel://h2",
        "sentinel://h;redis://h2",
        "sentinel://h/1;sentinel://h2/2",
        "sentinel://h;sentinel://h2/1",  # kombu would read db 0: the first part's
        "sentinel://h;sentinel://:pw@h2",
        "sentinel://h/zero",
    ],
)
def test_an_unusable_sentinel_url_is_one_error(url: str) -> None:
    assert check_ids(REDIS_URL=url, SENTINEL_MASTER="m") == {"delayqueue.E009"}


def test_the_master_name_falls_back_to_celerys_broker_options() -> None:
    with override_settings(
        DELAYQUEUE={},
        CELERY_BROKER_URL=GOOD,
        CELERY_BROKER_TRANSPORT_OPTIONS={"master_name": "mymaster"},
    ):
        assert {m.id for m in run_checks() if m.id and m.id.startswith("delayqueue.")} == set()
        from delayqueue.conf import get_settings

        assert get_settings().sentinel_master == "mymaster"
    with override_settings(DELAYQUEUE={}, CELERY_BROKER_URL=GOOD):
        assert "delayqueue.E008" in {m.id for m in run_checks()}


def test_the_url_is_read_as_kombu_reads_it() -> None:
    target = parse_sentinel_url(
        "sentinel://u:p%40ss@h1/3?socket_timeout=0.5;sentinel://h2:26380;sentinel://h3:1/3"
    )
    assert target.sentinels == [("h1", 26379), ("h2", 26380), ("h3", 1)]
    assert target.options == {"username": "u", "password": "p@ss", "db": 3, "socket_timeout": 0.5}
    # the form of Celery's docs: the database at the very end, where kombu ignores it
    assert parse_sentinel_url("sentinel://h1;sentinel://h2/0").options == {}


def test_passwords_stay_out_of_errors_and_pages() -> None:
    url = "sentinel://:hunter2secret@h1:26379;sentinel://user:hunter2secret@h2:26379/0"
    assert "hunter2" not in redact_url(url)
    assert redact_url(url).count("***@") == 2
    for bad in (url.replace("h2:26379", "h2:port"), url.replace("sentinel://user", "redis://user")):
        with pytest.raises(InvalidOption) as error:
            parse_sentinel_url(bad)
        assert "hunter2" not in str(error.value)
    with override_settings(DELAYQUEUE={"REDIS_URL": url.replace("h2:26379", "h2:port")}):
        messages = [str(m) for m in run_checks() if m.id and m.id.startswith("delayqueue.")]
    assert messages and not [m for m in messages if "hunter2" in m]


def test_unreachable_sentinels_give_a_clear_error_in_time(settings: Any) -> None:
    url = f"sentinel://:hunter2secret@127.0.0.1:{free_port()};sentinel://127.0.0.1:{free_port()}/0"
    settings.DELAYQUEUE = {
        **settings.DELAYQUEUE,
        "REDIS_URL": url,
        "SENTINEL_MASTER": MASTER_NAME,
        "SOCKET_TIMEOUT": 1,
    }
    started = time.monotonic()
    with pytest.raises(RedisUnavailable) as error:
        jobs.record.delay_for("nowhere", seconds=5, on_commit=False)
    assert time.monotonic() - started < 3
    assert "No master found for 'mymaster'" in str(error.value)
    assert "hunter2" not in str(error.value) and "127.0.0.1" in str(error.value)
    with pytest.raises(RedisUnavailable):
        execution.run(transitions.cancel(Q, job_id="01J0000000000000000000000", key=""))
