"""The single-call path of delay_for (engine/direct.py, DirectConnections): what redis-py's client
does for us elsewhere, it must do too."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

import hiredis
import pytest
import redis
from redis._parsers import BaseParser

from delayqueue.engine import clients as connection
from delayqueue.engine import direct as direct_path
from delayqueue.engine import execution, transitions
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import RedisUnavailable
from delayqueue.producer import api as queue
from delayqueue.producer import writes
from tests.support import jobs
from tests.support.data_redis import command_calls, only_on
from tests.support.redis_server import RedisServer
from tests.support.states import claim_all

# On a cluster delay_for takes the cluster client's path (test_cluster.py says so).
pytestmark = only_on("single", "sentinel")

SCHEDULED = queue_keys("tests").scheduled


def test_a_script_redis_lost_is_loaded_again(r: redis.Redis) -> None:
    jobs.record.delay_for("first", seconds=60, on_commit=False)
    r.script_flush()
    job = jobs.record.delay_for("after flush", seconds=60, on_commit=False)
    assert job.state == "scheduled" and r.zscore(SCHEDULED, job.id) is not None


def test_a_script_missing_after_two_failed_connects_is_loaded_on_the_third(
    r: redis.Redis,
) -> None:
    """A failover as a caller sees it: the old master refuses two connects, then the
    promoted replica answers, without the scripts (replicas do not keep them). The script
    is loaded there, and the call goes through."""
    jobs.record.delay_for("first", seconds=60, on_commit=False)
    direct = direct_path.connections.made
    assert direct is not None
    real = direct._connection_class
    refusals = [2]

    class FailingOver(real):  # type: ignore[misc, valid-type]
        def connect(self) -> None:
            if refusals[0]:
                refusals[0] -= 1
                raise redis.ConnectionError("connection refused (the old master)")
            super().connect()

    direct.close()  # the next call makes a new connection, of this class
    direct._connection_class = FailingOver
    r.script_flush()
    try:
        job = jobs.record.delay_for("after failover", seconds=60, on_commit=False)
    finally:
        direct._connection_class = real
    assert refusals == [0] and r.zscore(SCHEDULED, job.id) is not None


def test_a_connection_dropped_while_idle_is_replaced(r: redis.Redis) -> None:
    jobs.record.delay_for("first", seconds=60, on_commit=False)
    assert direct_path.connections.made is not None
    (idle,) = direct_path.connections.made._idle
    port = idle.connection._sock.getsockname()[1]  # type: ignore[attr-defined]
    (mine,) = [c for c in r.client_list() if c["addr"].endswith(f":{port}")]
    r.client_kill_filter(_id=mine["id"])
    job = jobs.record.delay_for("after kill", seconds=60, on_commit=False)
    assert r.zscore(SCHEDULED, job.id) is not None and r.zcard(SCHEDULED) == 2


def test_a_retry_of_the_same_call_keeps_one_job_created(r: redis.Redis) -> None:
    """A reply lost after Redis ran the call sends it again: same id, so same job."""
    one = queue.spec(jobs.record, ("k",), delay=60, key="once")
    for _ in range(2):
        reply = execution.run_direct(writes.enqueue_call([one]))
        assert reply[0].outcome == "created" and reply[0].id == one.job.id
    assert r.zcard(SCHEDULED) == 1 and r.hget(queue_keys("tests").dedupe, "once") == one.job.id


def test_threads_share_the_connections(r: redis.Redis) -> None:
    ids: list[str] = []

    def enqueue_many() -> None:
        for i in range(50):
            ids.append(jobs.record.delay_for(f"t{i}", seconds=60, on_commit=False).id)

    threads = [threading.Thread(target=enqueue_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 200 and r.zcard(SCHEDULED) == 200
    assert direct_path.connections.made is not None and len(direct_path.connections.made._idle) <= 4


def test_a_forked_child_uses_connections_of_its_own(r: redis.Redis) -> None:
    jobs.record.delay_for("parent", seconds=60, on_commit=False)
    pid = os.fork()
    if pid == 0:  # the child: enqueue, then leave without running the parent's cleanup
        try:
            jobs.record.delay_for("child", seconds=60, on_commit=False)
            os._exit(0)
        except BaseException:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    job = jobs.record.delay_for("parent again", seconds=60, on_commit=False)  # socket intact
    assert r.zscore(SCHEDULED, job.id) is not None and r.zcard(SCHEDULED) == 3


def test_only_calls_safe_to_resend_take_the_direct_connection(r: redis.Redis) -> None:
    claim = transitions.claim(queue_keys("tests"), limit=10, visibility_ms=1000)
    assert not claim.resend_safe
    with pytest.raises(ValueError, match="not safe to send twice"):
        execution.run_direct(claim)


def test_warm_up_registers_the_scripts_and_opens_a_direct_connection(r: redis.Redis) -> None:
    from delayqueue.engine import clients

    clients.reset()
    assert direct_path.connections.made is None and execution._scripts is None
    execution.warm_up()
    direct = direct_path.connections.made
    assert direct is not None and execution._scripts is not None
    [idle] = direct._idle
    assert idle.connection._sock is not None  # connected before any call
    jobs.record.delay_for("after warm-up", seconds=60, on_commit=False)
    assert direct._idle == [idle]  # the first call used it


def test_the_reply_is_read_off_the_socket_and_a_resp3_push_before_it_is_skipped(
    r: redis.Redis,
) -> None:
    """The direct path reads replies with its own hiredis reader. A RESP3 push that arrives
    first (here a client-tracking invalidation; on a managed Redis a maintenance notice) is
    not taken for the reply."""
    jobs.record.delay_for("first", seconds=60, on_commit=False)
    assert direct_path.connections.made is not None
    (idle,) = direct_path.connections.made._idle
    if idle.connection.protocol not in (3, "3"):
        pytest.skip("the client speaks RESP2: Redis sends it no pushes")
    assert idle._reader is not None  # the direct read, not redis-py's read path
    pack = direct_path.packed
    assert idle.exchange(pack("CLIENT", "TRACKING", "ON")) == "OK"
    r.set("dq-test:tracked", "1")
    assert idle.exchange(pack("GET", "dq-test:tracked")) == "1"  # now tracked
    r.set("dq-test:tracked", "2")  # an invalidation push is on its way to the connection
    assert idle.exchange(pack("ECHO", "after the push")) == "after the push"
    assert idle.exchange(pack("CLIENT", "TRACKING", "OFF")) == "OK"
    job = jobs.record.delay_for("after", seconds=60, on_commit=False)
    assert r.zscore(SCHEDULED, job.id) is not None


def test_an_error_reply_read_off_the_socket_is_raised_as_redis_py_would(r: redis.Redis) -> None:
    jobs.record.delay_for("first", seconds=60, on_commit=False)
    assert direct_path.connections.made is not None
    (idle,) = direct_path.connections.made._idle
    r.set("dq-test:text", "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        idle.exchange(direct_path.packed("ZADD", "dq-test:text", 1, "a"))
    with pytest.raises(redis.exceptions.NoScriptError):
        idle.exchange(direct_path.packed("EVALSHA", "0" * 40, 0))
    assert idle.exchange(direct_path.packed("PING")) == "PONG"  # the connection reads on


def test_a_reply_that_does_not_come_in_time_raises_and_the_next_call_goes_through(
    r: redis.Redis,
) -> None:
    """The direct socket keeps the client's SOCKET_TIMEOUT (as the kernel's receive
    timeout): a call Redis holds back (CLIENT PAUSE) fails after it, on its own, and is
    not sent three times; the connection is dropped and the next call makes a new one."""
    jobs.record.delay_for("first", seconds=60, on_commit=False)
    assert direct_path.connections.made is not None
    (idle,) = direct_path.connections.made._idle
    idle.disconnect()
    idle.connection.socket_timeout = 0.3
    idle.connect()
    sock = idle.connection._sock
    assert sock is not None
    if os.uname().sysname == "Linux":
        assert sock.gettimeout() is None  # the kernel's timeout, not Python's polling
    r.client_pause(1_500, all=False)  # write commands wait (EVALSHA of a write script)
    started = time.monotonic()
    with pytest.raises(RedisUnavailable, match="Timeout"):
        jobs.record.delay_for("held back", seconds=60, on_commit=False)
    assert 0.25 < time.monotonic() - started < 1.0
    r.client_unpause()
    job = jobs.record.delay_for("after", seconds=60, on_commit=False)
    assert r.zscore(SCHEDULED, job.id) is not None


@pytest.mark.parametrize(
    "chunks",
    [
        [b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n+the reply\r\n"],  # in one read
        [b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n", b"+the reply\r\n"],
        [b"+the re", b"ply\r\n"],  # a reply split over two reads
    ],
)
def test_the_reply_after_a_push_is_found_however_the_socket_delivers_them(
    chunks: list[bytes],
) -> None:
    """The read loop on a socket pair standing for Redis: a push and the reply in one read
    (the reply is already in the reader: waiting for more would hang), or in two."""
    ours, theirs = socket.socketpair()
    ours.settimeout(2)  # a loop waiting for a reply it already has fails, not hangs
    try:
        link = direct_path._Link(_Socket(ours))  # type: ignore[arg-type]
        link._reader = hiredis.Reader(encoding="utf-8")
        for chunk in chunks:
            theirs.sendall(chunk)
            time.sleep(0.01)  # each chunk is a read of its own
        assert link.exchange(b"PING\r\n") == "the reply"
    finally:
        ours.close()
        theirs.close()


class _Socket:
    """A connection as ``_Link.exchange`` uses one: its socket."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock


@pytest.mark.parametrize(
    ("wire", "error"),
    [
        (b"-LOADING Redis is loading the dataset in memory\r\n", redis.BusyLoadingError),
        (b"-NOAUTH Authentication required.\r\n", redis.AuthenticationError),
        (b"-ERR unknown command\r\n", redis.ResponseError),
        (b"?what\r\n", redis.InvalidResponse),  # not RESP
    ],
)
def test_error_replies_read_off_the_socket_are_raised_as_redis_py_raises_them(
    wire: bytes, error: type[Exception]
) -> None:
    """LOADING is a ConnectionError in redis-py (the caller's retry reconnects for it); it
    must be raised, not returned as the reply."""
    ours, theirs = socket.socketpair()
    ours.settimeout(2)
    try:
        link = direct_path._Link(_Socket(ours))  # type: ignore[arg-type]
        link._reader = hiredis.Reader(
            protocolError=redis.InvalidResponse, replyError=BaseParser.parse_error
        )
        theirs.sendall(wire)
        with pytest.raises(error):
            link.exchange(b"PING\r\n")
    finally:
        ours.close()
        theirs.close()


@only_on("single")
def test_an_idle_direct_connection_is_checked_with_a_ping_first(settings: Any) -> None:
    """redis-py's health check (health_check_interval), which the direct read path makes
    itself: after that long idle, a PING before the call, so a connection dropped without a
    word is replaced before the job is sent. On a server of its own: every PING that server
    counts is this test's (the suite's server has other clients, the session's Celery worker
    among them, whose own health checks may fall in the window)."""
    server = RedisServer().start()
    try:
        settings.DELAYQUEUE = {**settings.DELAYQUEUE, "REDIS_URL": server.url}
        connection.reset()
        r = server.client()
        jobs.record.delay_for("first", seconds=60, on_commit=False)
        assert direct_path.connections.made is not None
        (idle,) = direct_path.connections.made._idle
        setattr(idle.connection, "health_check_interval", 0.2)  # noqa: B010  (typed int)
        pings = command_calls(r, "ping")
        jobs.record.delay_for("at once", seconds=60, on_commit=False)
        assert command_calls(r, "ping") == pings  # used a moment ago: no PING
        time.sleep(0.3)
        jobs.record.delay_for("after idling", seconds=60, on_commit=False)
        assert command_calls(r, "ping") == pings + 1
        assert r.zcard(SCHEDULED) == 3
        r.close()
    finally:
        connection.reset()
        server.cleanup()


def test_a_socket_of_another_kind_keeps_pythons_timeout() -> None:
    """gevent's and eventlet's sockets stand in for the stdlib's: the kernel's timeout would
    do nothing on their non-blocking sockets, and None would mean "wait forever"."""

    class Green(socket.socket):  # a class from another module, like gevent's
        pass

    for sock in (Green(), socket.socket()):
        sock.settimeout(1.5)
        direct_path._kernel_timeouts(sock)
        expected = 1.5 if type(sock) is Green or os.uname().sysname != "Linux" else None
        assert sock.gettimeout() == expected
        sock.close()


def test_a_hiredis_without_resp3_pushes_still_reads_replies(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hiredis before 3.2 has no PushNotification (RESP2 connections still read directly
    with it): the reply loop takes every reply as the reply, it does not fail on it."""
    jobs.record.delay_for("first", seconds=60, on_commit=False)
    assert direct_path.connections.made is not None
    (idle,) = direct_path.connections.made._idle
    assert idle._reader is not None  # the direct read, not redis-py's read path
    monkeypatch.setattr(direct_path, "PUSHES", ())
    assert idle.exchange(direct_path.packed("PING")) == "PONG"
    assert idle.exchange(direct_path.packed("ECHO", "read")) == "read"


def test_a_first_send_skips_the_resends_check_and_a_send_after_it_does_not(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """delay_for's first send says its id is new ("plain-first": no EXISTS of its hash);
    a reply lost after Redis ran it sends it again as "plain", which finds the job written
    (and would find its hash, had a worker claimed it in between)."""
    jobs.record.delay_for("warm", seconds=60, on_commit=False)
    sent: list[bytes] = []
    real = direct_path._Link.exchange_all

    def reply_lost_once(link: Any, packed: bytes, count: int) -> list[Any]:
        sent.append(packed)
        replies = real(link, packed, count)  # (Redis ran it)
        if len(sent) == 1:
            raise redis.ConnectionError("connection reset: the reply is lost")
        return replies

    monkeypatch.setattr(direct_path._Link, "exchange_all", reply_lost_once)
    job = jobs.record.delay_for("lost reply", seconds=60, on_commit=False)
    assert len(sent) == 2 and b"$11\r\nplain-first\r\n" in sent[0]
    assert b"plain-first" not in sent[1] and b"$5\r\nplain\r\n" in sent[1]
    assert job.state == "scheduled" and r.zcard(SCHEDULED) == 2


def test_only_a_first_send_may_skip_the_check(r: redis.Redis) -> None:
    """Why a resend says "plain": "plain-first" writes a claimed job's spec again."""
    one = queue.spec(jobs.record, ("claimed",), delay=0)
    call: transitions.ScriptCall[Any] = writes.chunk_call([one])
    assert call.first_args is not None and call.first_args[2] == "plain-first"
    execution.run(call)
    assert [c.id.decode() for c in claim_all()] == [one.job.id]
    execution.run(call)  # "plain": the job has a hash, so nothing is written
    assert r.zscore(SCHEDULED, one.job.id) is None
    execution.run(call._replace(args=call.first_args))
    assert r.zscore(SCHEDULED, one.job.id) is not None  # written again: a second run


# ---- delay_many: its chunks in one round trip on a direct connection ------------------------


def test_delay_many_sends_its_chunks_at_once_and_their_first_send_skips_the_resends_check(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delay_many of more than one chunk: one send of every chunk's call, each saying its
    ids are new ("plain-first": no EXISTS of their hashes)."""
    jobs.record.delay_many([("warm",)], seconds=60, on_commit=False)
    sent: list[bytes] = []
    real = direct_path._Link.exchange_all

    def recorded(link: Any, packed: bytes, count: int) -> list[Any]:
        sent.append(packed)
        return real(link, packed, count)

    monkeypatch.setattr(direct_path._Link, "exchange_all", recorded)
    before = command_calls(r, "exists")
    made = jobs.record.delay_many([(i,) for i in range(writes.CHUNK + 7)], seconds=60)
    assert len(sent) == 1 and sent[0].count(b"$11\r\nplain-first\r\n") == 2
    assert command_calls(r, "exists") == before
    assert {job.state for job in made} == {"scheduled"}
    assert r.zcard(SCHEDULED) == writes.CHUNK + 8


def test_a_delay_many_whose_reply_was_lost_is_sent_again_as_plain(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply lost after Redis ran the chunks sends them again as "plain", which finds
    their jobs written (and would find their hashes, had a worker claimed some)."""
    jobs.record.delay_many([("warm",)], seconds=60, on_commit=False)
    sent: list[bytes] = []
    real = direct_path._Link.exchange_all

    def reply_lost_once(link: Any, packed: bytes, count: int) -> list[Any]:
        sent.append(packed)
        replies = real(link, packed, count)  # (Redis ran them)
        if len(sent) == 1:
            raise redis.ConnectionError("connection reset: the replies are lost")
        return replies

    monkeypatch.setattr(direct_path._Link, "exchange_all", reply_lost_once)
    made = jobs.record.delay_many([(i,) for i in range(writes.CHUNK + 7)], seconds=60)
    assert len(sent) == 2 and sent[0].count(b"$11\r\nplain-first\r\n") == 2
    assert b"plain-first" not in sent[1] and sent[1].count(b"$5\r\nplain\r\n") == 2
    assert {job.state for job in made} == {"scheduled"}
    assert r.zcard(SCHEDULED) == writes.CHUNK + 8


def test_a_delay_many_after_the_scripts_were_lost_loads_them_and_goes_through(
    r: redis.Redis,
) -> None:
    jobs.record.delay_many([("warm",)], seconds=60, on_commit=False)
    r.script_flush()
    made = jobs.record.delay_many([(i,) for i in range(writes.CHUNK + 7)], seconds=60)
    assert {job.state for job in made} == {"scheduled"}
    assert r.zcard(SCHEDULED) == writes.CHUNK + 8


def test_only_a_first_send_of_a_batch_may_skip_the_check(r: redis.Redis) -> None:
    """Why a batch's resend says "plain": "plain-first" writes a claimed job's spec again."""
    specs = [queue.spec(jobs.record, (f"claimed {i}",), delay=0) for i in range(3)]
    call: transitions.ScriptCall[Any] = writes.chunk_call(specs)
    assert call.first_args is not None and call.first_args[2] == "plain-first"
    execution.run(call._replace(args=call.first_args))
    assert {c.id.decode() for c in claim_all()} == {s.job.id for s in specs}
    execution.run(call)  # "plain": the jobs have hashes, so nothing is written
    assert r.zcard(SCHEDULED) == 0
    execution.run(call._replace(args=call.first_args))
    assert r.zcard(SCHEDULED) == 3  # written again: a second run
