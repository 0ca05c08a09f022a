"""Running the calls ``transitions`` builds: one at a time, many in one round trip, or on
the direct connections (only calls safe to resend). Scripts are registered once per client
and run by SHA; a script Redis lost (restart, SCRIPT FLUSH) is loaded again.

A durable call (``durable=True``, or the ``DURABLE`` setting) is followed by ``WAIT`` in
the same round trip and on the same connection (on a cluster, one per node the calls went
to): it returns when ``DURABLE_REPLICAS`` replicas have everything the connection wrote."""

from __future__ import annotations

import _socket
import logging
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, NamedTuple, cast

import hiredis
import redis
from hiredis import pack_command
from redis import Redis
from redis._parsers import BaseParser
from redis.commands.core import Script
from redis.connection import AbstractConnection
from redis.exceptions import AskError, InvalidResponse, NoPermissionError, NoScriptError

from delayqueue.conf import get_settings
from delayqueue.engine.clients import get_raw_redis, get_redis, is_cluster, on_reset
from delayqueue.engine.redis_errors import redis_errors, translate
from delayqueue.engine.scripts import Scripts
from delayqueue.engine.transitions import ReplyT, ScriptCall
from delayqueue.errors import DelayQueueError, NotDurable

logger = logging.getLogger("delayqueue")
_lock = threading.Lock()
_scripts: Scripts | None = None
_direct: DirectConnections | None = None


def get_scripts() -> Scripts:
    global _scripts
    if _scripts is None:
        _scripts = Scripts(get_redis())
    return _scripts


@on_reset
def _forget() -> None:
    global _scripts, _direct
    with _lock:
        if _direct is not None:
            _direct.close()
        _scripts, _direct = None, None


class Wait(NamedTuple):
    """``WAIT replicas timeout_ms`` after a durable call."""

    replicas: int
    timeout_ms: int


def durability(durable: bool | None = None) -> Wait | None:
    """The WAIT a call makes: ``durable`` when given, else the ``DURABLE`` setting's."""
    config = get_settings()
    if not (config.durable if durable is None else durable):
        return None
    return Wait(int(config.durable_replicas), round(float(config.durable_timeout) * 1000))


def run(
    call: ScriptCall[ReplyT],
    client: Redis | None = None,
    *,
    durable: bool | None = None,
    strict: bool = True,
    as_bytes: bool = False,
) -> ReplyT:
    """Run one script call (EVALSHA, loading the script when Redis lost it) and read its
    reply; Redis's errors as delayqueue's (see ``translate``). Durable and ``strict`` (a
    caller's write): NotDurable when the replicas did not acknowledge it in time (it is
    written); not strict (the workers' own writes), a warning in the log. ``as_bytes``: on
    the client whose replies are bytes (ids read back as stored, UTF-8 or not)."""
    client = get_raw_redis() if as_bytes else client
    wait = durability(durable)
    if wait is not None:
        (reply,) = run_many([call], client, durable=True, strict=strict)
        if isinstance(reply, DelayQueueError):
            raise reply
        return cast(ReplyT, reply)
    script = get_scripts()[call.script]
    with redis_errors():
        reply = script(keys=call.keys, args=call.args, client=client or get_redis())
    return call.parse(reply)


def run_many(
    calls: Sequence[ScriptCall[Any]],
    client: Redis | None = None,
    *,
    durable: bool | None = None,
    strict: bool = False,
    as_bytes: bool = False,
) -> list[Any]:
    """Run many script calls in one round trip; each item of the result is the call's read
    reply, or the DelayQueueError its script raised (the other calls still ran).

    Durable, replicas that did not acknowledge in time are NotDurable when ``strict`` (a
    caller's write), else a warning in the log (the worker's own writes: the jobs it claimed
    must still be dispatched; a failover would only run them again). ``as_bytes``: as for
    ``run``."""
    if not calls:
        return []
    client = get_raw_redis() if as_bytes else client
    scripts = get_scripts()
    wait = durability(durable)
    with redis_errors():
        replies, acked = run_pipelined(
            [(scripts[c.script], c.keys, c.args) for c in calls], client, wait
        )
    if wait is not None and acked < wait.replicas:
        short = NotDurable(
            f"{_count(len(calls), 'write')} reached the master but {acked} of {wait.replicas} "
            f"replicas acknowledged them within {wait.timeout_ms} ms (WAIT): they are written, "
            "and a failover before a replica copies them could lose them (DURABLE needs "
            "replicas: Sentinel, Cluster or a managed Redis with replicas)"
        )
        if strict:
            raise short
        logger.warning("%s", short)
    return [
        translate(reply) if isinstance(reply, Exception) else call.parse(reply)
        for call, reply in zip(calls, replies, strict=True)
    ]


def _count(n: int, noun: str) -> str:
    return f"1 {noun}" if n == 1 else f"{n} {noun}s"


def run_all(
    calls: Sequence[ScriptCall[Any]],
    client: Redis | None = None,
    *,
    durable: bool | None = None,
    strict: bool = True,
) -> list[Any]:
    """``run_many``, raising the first error instead of returning it (NotDurable too, when
    ``strict``)."""
    replies = run_many(calls, client, durable=durable, strict=strict)
    for reply in replies:
        if isinstance(reply, DelayQueueError):
            raise reply
    return replies


Call = tuple[Script, list[str], list[Any]]


def run_pipelined(
    calls: list[Call], client: Redis | None = None, wait: Wait | None = None
) -> tuple[list[Any], int]:
    """Run many script calls in one round trip (EVALSHA), loading a script only when Redis
    has lost it (restart, SCRIPT FLUSH). Errors of single calls come back as exceptions.
    With ``wait``, WAIT follows in the same round trip; the second item is the fewest
    replicas that acknowledged (0 without a wait).

    Only the calls Redis refused for a missing script are sent again: the others already
    ran, and running them twice would lose their replies (a claim's jobs, say)."""
    client = client or get_redis()
    replies, acked = _execute(client, calls, wait)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        for script in {calls[i][0].sha: calls[i][0] for i in missing}.values():
            client.script_load(script.script)
        again, acked_again = _execute(client, [calls[i] for i in missing], wait)
        acked = min(acked, acked_again)
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies, acked


def _execute(client: Redis, calls: list[Call], wait: Wait | None) -> tuple[list[Any], int]:
    if wait is not None and is_cluster(client):
        return _execute_durable_on_cluster(client, calls, wait)
    pipe = client.pipeline(transaction=False)
    for script, keys, args in calls:
        # execute_command, not pipe.evalsha: redis-py's cluster pipeline refuses the method
        # (a script's keys may span slots, it says) yet routes the command by its keys. Each of
        # ours has its keys in one slot; the pipeline sends each node its own calls.
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    if wait is None:
        return pipe.execute(raise_on_error=False), 0
    pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
    *replies, acked = pipe.execute(raise_on_error=False)
    if isinstance(acked, Exception):  # NOPERM (the ACL lacks +wait), not "no replica"
        raise acked
    return replies, int(acked)


def _execute_durable_on_cluster(
    client: Any, calls: list[Call], wait: Wait
) -> tuple[list[Any], int]:
    """Durable calls on a cluster: each master's calls and their WAIT in one pipeline of
    that master's own client, so on one connection. (The cluster pipeline would send a call
    a failover MOVED on another connection, which a WAIT of the first would not cover.) A
    call MOVED by a stale slot map did not run: the map is learned again and the call sent
    to the master that holds its slot now, with a WAIT of its own."""
    replies: list[Any] = [None] * len(calls)
    acked = wait.replicas
    pending = list(range(len(calls)))
    for attempt in range(3):
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i in pending:
            node = client.get_node_from_key(calls[i][1][0])
            groups.setdefault(node.name, (node, []))[1].append(i)
        moved: list[int] = []
        for node, indexes in groups.values():
            pipe = client.get_redis_connection(node).pipeline(transaction=False)
            for i in indexes:
                script, keys, args = calls[i]
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
            try:
                *answers, node_acked = pipe.execute(raise_on_error=False)
            except redis.ConnectionError:
                client.nodes_manager.initialize()  # the next call finds the new master
                raise
            for i, answer in zip(indexes, answers, strict=True):
                replies[i] = answer
                if isinstance(answer, AskError) and attempt < 2:
                    moved.append(i)
            ran = len(indexes) > sum(isinstance(answer, AskError) for answer in answers)
            if isinstance(node_acked, Exception):
                if "NOPERM" in str(node_acked) or isinstance(node_acked, NoPermissionError):
                    raise node_acked
                if ran:  # (a node that ran nothing, now a replica, has nothing to wait for)
                    acked = 0
            elif ran:
                acked = min(acked, int(node_acked))
        if not moved:
            break
        client.nodes_manager.initialize()
        pending = moved
    return replies, acked


class DirectConnections:
    """Connections of our own for one script call per round trip, beside the client's pool.

    redis-py spends about 10 µs of CPU per command on its pool (a poll for stray data on
    every checkout), retries and instrumentation: as much as the rest of ``delay_for``
    together. Here an idle connection is popped off a list and pushed back after its reply
    (both atomic under the GIL, so threads share the list safely); a forked child starts
    with an empty list and never touches its parent's sockets. The call is written to the
    connection's socket and its reply read with a hiredis reader of the link's own
    (``_Link.exchange``), another 8 µs less than redis-py's read path.
    """

    def __init__(self, client: Redis) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._kwargs = pool.connection_kwargs
        self._idle: list[_Link] = []
        self._pid = os.getpid()

    def run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """EVALSHA ``script``, loading it when Redis lost it. Only for scripts that can run
        twice with the same arguments: a connection Redis dropped while it sat idle is
        replaced and the call sent again."""
        self._forget_parents()
        try:
            link, new = self._idle.pop(), False
        except IndexError:
            link, new = _Link(self._connection_class(**self._kwargs)), True
        try:
            reply = link.call(script, keys, args, connect=new)
        except BaseException:
            link.disconnect()
            raise
        self._idle.append(link)
        return reply

    def open(self) -> None:
        """Connect one idle connection ahead of the first call."""
        self._forget_parents()
        if not self._idle:
            link = _Link(self._connection_class(**self._kwargs))
            link.connect()
            self._idle.append(link)

    def _forget_parents(self) -> None:
        """In a forked child, start with no idle connections (the parent's sockets)."""
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()

    def close(self) -> None:
        idle, self._idle = self._idle, []
        if self._pid == os.getpid():
            for link in idle:
                link.disconnect()


class _Link:
    """One direct connection: redis-py's connection (which connects, authenticates, asks
    the sentinels for the master, speaks TLS) and, when redis-py's own read path does
    nothing more than parse the reply, a hiredis reader that reads its socket directly."""

    __slots__ = ("connection", "_reader", "_used")

    def __init__(self, connection: AbstractConnection) -> None:
        self.connection = connection
        self._reader: hiredis.Reader | None = None
        self._used = 0.0  # time.monotonic() of its last reply

    def connect(self) -> None:
        """Connect (a no-op when connected); a reader for what the socket says from now on.
        Not the send's own reconnect, which goes back to the last address: a
        Sentinel-managed connection asks the sentinels for the master here (a master that
        answered READONLY was demoted; the connection dropped itself)."""
        self.connection.connect()
        self._reader = _reader_for(self.connection)
        if self._reader is not None:
            _kernel_timeouts(getattr(self.connection, "_sock", None))
        self._used = time.monotonic()

    def disconnect(self) -> None:
        self.connection.disconnect()
        self._reader = None

    def call(self, script: Script, keys: list[str], args: list[Any], *, connect: bool) -> Any:
        failures, loaded = 0, False
        while True:
            try:
                if connect or failures:
                    self.connect()
                elif self._reader is not None:
                    self._check_health()
                return self.exchange(_packed("EVALSHA", script.sha, len(keys), *keys, *args))
            except NoScriptError:
                # Once per call, whatever connection failures came first: a replica promoted
                # by a failover has no scripts, and is often reached on the last attempt.
                if loaded:
                    raise
                loaded = True
                self.exchange(_packed("SCRIPT", "LOAD", script.script))
            except redis.AuthenticationError:
                raise
            except redis.ConnectionError:
                failures += 1
                if failures == 3:
                    raise
                self.disconnect()  # the next attempt connects again

    def _check_health(self) -> None:
        """redis-py's health check, which its read path would make: after
        ``health_check_interval`` seconds idle, a PING first, so that a connection a NAT or a
        load balancer dropped without a word is replaced before the call is sent."""
        interval = getattr(self.connection, "health_check_interval", 0)
        if interval and time.monotonic() - self._used > interval:
            try:
                self.exchange(_packed("PING"))
            except (redis.ConnectionError, redis.TimeoutError):
                self.disconnect()
                self.connect()

    def exchange(self, packed: bytes) -> Any:
        """Send one packed command and return its reply (raise it, when an error)."""
        reader, sock = self._reader, getattr(self.connection, "_sock", None)
        if reader is None or sock is None:  # redis-py's read path, or not connected
            self.connection.send_packed_command([packed])
            return self.connection.read_response()
        try:
            sock.sendall(packed)
            while True:
                reply = reader.gets()
                if reply is False:  # the reply (or the rest of it) is still on its way
                    data = sock.recv(65536)
                    if not data:
                        raise redis.ConnectionError("Connection closed by server.")
                    reader.feed(data)
                elif not isinstance(reply, _PUSH):
                    break
                # A RESP3 push (a server's maintenance notice) is not the reply: such hints
                # only speed up a reconnect, which a dropped connection makes anyway.
        except (TimeoutError, BlockingIOError):  # (BlockingIOError: see _kernel_timeouts)
            raise redis.TimeoutError("Timeout reading from socket") from None
        except OSError as exc:
            raise redis.ConnectionError(f"Error while talking to Redis: {exc}") from None
        # An error reply, as redis-py raises it: a ResponseError, or a ConnectionError for
        # LOADING, NOAUTH and the like, which the caller's retry reconnects for.
        if isinstance(reply, Exception):
            raise reply
        self._used = time.monotonic()
        return reply


def _kernel_timeouts(sock: socket.socket | None) -> None:
    """Give a plain TCP or Unix socket its timeout as the kernel's SO_RCVTIMEO and
    SO_SNDTIMEO (Linux) and make it blocking for Python: a Python socket with a timeout
    polls before every send and every recv, two system calls (about 4 µs) per round trip.
    A send or recv that times out now fails with EAGAIN (BlockingIOError), which
    ``exchange`` raises as redis-py's TimeoutError. Sockets of other kinds (TLS, gevent's
    or eventlet's, whose socket class may stand in for the stdlib's), and other systems,
    keep Python's timeout."""
    if (
        sock is None
        or not isinstance(sock, _socket.socket)  # (a green socket wraps one instead)
        or type(sock).__module__ != "socket"
        or not _KERNEL_TIMEVAL
    ):
        return
    timeout = sock.gettimeout()
    if timeout is not None:
        micros = max(1, round(timeout * 1e6))  # (0 would mean no timeout at all)
        interval = struct.pack("ll", micros // 1_000_000, micros % 1_000_000)  # a timeval
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, interval)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, interval)
    sock.settimeout(None)


# SO_RCVTIMEO's struct timeval as two longs: so on 64-bit Linux (not on 32-bit systems
# whose time_t is 64 bits).
_KERNEL_TIMEVAL = sys.platform.startswith("linux") and struct.calcsize("l") == 8
# RESP3 pushes as hiredis returns them (hiredis 3.2 and later; with an older hiredis a
# RESP3 connection keeps redis-py's read path: see _reader_for).
_PUSH: Any = getattr(hiredis, "PushNotification", None)


def _packed(*command: Any) -> bytes:
    """A command as RESP: hiredis (a dependency) packs it without redis-py's pass over each
    argument."""
    return pack_command(command)


def _reader_for(connection: AbstractConnection) -> hiredis.Reader | None:
    """A reader of replies (RESP2 or RESP3: hiredis reads both) decoded as the connection
    decodes them, when reading the socket directly is all redis-py's read path would do:
    not for a connection class that reads differently (a Sentinel-managed connection
    turns READONLY into a reconnect)."""
    kind = type(connection)
    if (
        kind.read_response is not AbstractConnection.read_response
        or kind.send_packed_command is not AbstractConnection.send_packed_command
        or (_PUSH is None and str(getattr(connection, "protocol", 2)) == "3")
    ):
        return None
    encoder = connection.encoder
    decoding = (
        {"encoding": encoder.encoding, "errors": encoder.encoding_errors}
        if encoder.decode_responses
        else {}
    )
    return hiredis.Reader(
        protocolError=InvalidResponse, replyError=BaseParser.parse_error, **decoding
    )


def _direct_connections() -> DirectConnections:
    global _direct
    if _direct is None:
        client = get_redis()  # before the lock, which get_redis() takes itself
        with _lock:
            if _direct is None:
                _direct = DirectConnections(client)
    return _direct


def run_direct(
    call: ScriptCall[ReplyT], *, durable: bool | None = None, strict: bool = True
) -> ReplyT:
    """One script call on a connection of ``DirectConnections`` (same server and settings
    as ``get_redis()``): only for calls safe to resend (``ScriptCall.resend_safe``)."""
    if not call.resend_safe:
        raise ValueError(f"the {call.script} script is not safe to send twice")
    if is_cluster(get_redis()) or durability(durable) is not None:
        # A connection of our own would be to one node; the cluster client knows which
        # master holds the call's slot and follows it through failovers and resharding.
        # A durable call's WAIT goes in the same round trip (``run``).
        return run(call, durable=durable, strict=strict)
    direct = _direct_connections()
    with redis_errors():
        reply = direct.run(get_scripts()[call.script], call.keys, call.args)
    return call.parse(reply)


def warm_up() -> None:
    """Register the scripts and open a direct connection now (a new Celery pool process,
    a web worker): the first job's round trip does not pay for them."""
    get_scripts()
    with redis_errors():
        if is_cluster(get_redis()):
            get_redis().ping()  # a connection to a node (the client has the slot map)
        else:
            _direct_connections().open()
