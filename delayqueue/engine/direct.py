"""The direct connections of the sync API: one script call per round trip on connections of
our own beside redis-py's pool (``execution.run_direct``; only calls safe to resend).

What redis-py's pool and reply path cost per call, and what was tried, is in
docs/design.md, "Performance notes".
"""

from __future__ import annotations

import _socket
import os
import socket
import struct
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import hiredis
import redis
from hiredis import pack_command
from redis import Redis
from redis._parsers import BaseParser
from redis.commands.core import Script
from redis.connection import AbstractConnection
from redis.exceptions import InvalidResponse, NoScriptError, ResponseError

from delayqueue.engine.clients import OnFirstUse


class DirectConnections:
    """Connections of our own for one script call per round trip, beside the client's pool.

    redis-py's pool polls for stray data on every checkout and adds retries and
    instrumentation to each command (docs/design.md, "Performance notes"). Here an idle
    connection is popped off a list and pushed back after its reply
    (both atomic under the GIL, so threads share the list safely); a forked child starts
    with an empty list and never touches its parent's sockets. The call is written to the
    connection's socket and its reply read with a hiredis reader of the link's own
    (``_Link.exchange``) instead of redis-py's read path.
    """

    def __init__(self, client: Redis) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._kwargs = pool.connection_kwargs
        self._idle: list[_Link] = []
        self._pid = os.getpid()

    def run(
        self,
        script: Script,
        keys: list[str],
        args: list[Any],
        first_args: list[Any] | None = None,
        *,
        tries: int = 3,
    ) -> Any:
        """EVALSHA ``script``, loading it when Redis lost it. Only for scripts that can run
        twice with the same arguments: a connection Redis dropped while it sat idle is
        replaced and the call sent again, ``tries`` times in all. With ``first_args``
        (``ScriptCall.first_args``) the first send has them, and every send after it
        ``args``."""
        again: Callable[[], bytes] | None = None
        if first_args is None:
            command = pack_command(("EVALSHA", script.sha, len(keys), *keys, *args))
        else:  # the resend's form is made and packed only when a resend is made
            command = pack_command(("EVALSHA", script.sha, len(keys), *keys, *first_args))

            def resend() -> bytes:
                return pack_command(("EVALSHA", script.sha, len(keys), *keys, *args))

            again = resend
        link, new = self._take()
        try:
            reply = link.call(command, script, connect=new, tries=tries, again=again)
        except BaseException:
            link.disconnect()
            raise
        self._idle.append(link)
        return reply

    def run_many(
        self, calls: list[tuple[Script, list[str], list[Any], list[Any] | None]], *, tries: int = 3
    ) -> list[Any]:
        """``run`` for several calls ``(script, keys, args, first_args)`` in one round trip,
        in order: each one's reply, an error reply as its exception (not raised). A script
        Redis lost is loaded and the calls it refused sent again, in one round trip."""
        first: list[bytes] = []
        again: list[Callable[[], bytes] | None] = []
        for script, keys, args, first_args in calls:
            head = ("EVALSHA", script.sha, len(keys), *keys)
            first.append(pack_command((*head, *(args if first_args is None else first_args))))
            again.append(None if first_args is None else partial(pack_command, (*head, *args)))
        link, new = self._take()
        try:
            replies = link.call_many(first, [c[0] for c in calls], again, connect=new, tries=tries)
        except BaseException:
            link.disconnect()
            raise
        self._idle.append(link)
        return replies

    def run_all(self, commands: list[bytes]) -> list[Any]:
        """Send the packed ``commands`` at once on one connection and read a reply for each
        (an error reply as its exception, not raised; engine/direct_pipeline.py). Only for
        commands that can run twice: a connection Redis dropped while it sat idle is
        replaced and all of them sent again."""
        link, new = self._take()
        try:
            replies = link.call_all(commands, connect=new)
        except BaseException:
            link.disconnect()
            raise
        self._idle.append(link)
        return replies

    def _take(self) -> tuple[_Link, bool]:
        """An idle connection, or a new one when none is idle (``True``: to connect). The
        caller puts it back on the idle list after its reply, or disconnects it when the
        call raised."""
        if self._pid != os.getpid():  # a forked child: not its parent's sockets
            self._idle, self._pid = [], os.getpid()
        try:
            return self._idle.pop(), False
        except IndexError:
            return _Link(self._connection_class(**self._kwargs)), True

    def open(self) -> None:
        """Connect one idle connection ahead of the first call."""
        link, new = self._take()
        if new:
            link.connect()
        self._idle.append(link)

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

    def call(
        self,
        command: bytes,
        script: Script,
        *,
        connect: bool,
        tries: int = 3,
        again: Callable[[], bytes] | None = None,
    ) -> Any:
        """Send the packed EVALSHA ``command`` of ``script`` and return its reply (raise it,
        when an error). When Redis lost the script (a replica promoted by a failover has
        none), it is loaded and the command sent again, in one round trip (as it was: it
        did not run). ``again``: what packs the command to send after a connection error
        instead (``DirectConnections.run``'s ``first_args``)."""
        (reply,) = self._attempts(command, 1, connect=connect, tries=tries, again=again)
        if isinstance(reply, NoScriptError):
            load = packed("SCRIPT", "LOAD", script.script)
            after = None if again is None else partial(_joined, load, again)
            loaded, reply = self._attempts(
                load + command, 2, connect=False, tries=tries, again=after
            )
            if isinstance(loaded, Exception):
                raise loaded
        if isinstance(reply, Exception):
            raise reply
        return reply

    def call_many(
        self,
        commands: list[bytes],
        scripts: list[Script],
        again: list[Callable[[], bytes] | None],
        *,
        connect: bool,
        tries: int = 3,
    ) -> list[Any]:
        """``call`` for several packed EVALSHA ``commands`` (of ``scripts``) at once: each
        one's reply, an error reply as its exception (not raised). ``again[i]``: what packs
        command i to send after a connection error instead, or None."""
        replies = self._attempts(
            b"".join(commands), len(commands), connect=connect, tries=tries,
            again=_all_again(commands, again),
        )  # fmt: skip
        lost = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if lost:  # (they did not run: sent again as they were, after their scripts' loads)
            loads = {scripts[i].sha: scripts[i] for i in lost}
            load = b"".join(packed("SCRIPT", "LOAD", script.script) for script in loads.values())
            resend = _all_again([commands[i] for i in lost], [again[i] for i in lost])
            after = None if resend is None else partial(_joined, load, resend)
            answers = self._attempts(
                load + b"".join(commands[i] for i in lost), len(loads) + len(lost),
                connect=False, tries=tries, again=after,
            )  # fmt: skip
            for loaded in answers[: len(loads)]:
                if isinstance(loaded, Exception):
                    raise loaded
            for i, reply in zip(lost, answers[len(loads) :], strict=True):
                replies[i] = reply
        return replies

    def call_all(self, commands: list[bytes], *, connect: bool, tries: int = 3) -> list[Any]:
        """Send the packed ``commands`` at once and read a reply for each (an error reply as
        its exception, not raised): ``call`` for several, the scripts' loading left to the
        caller (engine/direct_pipeline.py)."""
        return self._attempts(b"".join(commands), len(commands), connect=connect, tries=tries)

    def _attempts(
        self,
        joined: bytes,
        count: int,
        *,
        connect: bool,
        tries: int,
        again: Callable[[], bytes] | None = None,
    ) -> list[Any]:
        """The replies to ``joined`` (``count`` packed commands), connected first when
        ``connect`` (a new link) and after each failed attempt, else after the health check;
        a connection error is tried again, ``tries`` attempts in all. A reply that is a
        ConnectionError (LOADING, NOAUTH and the like: the connection is not usable) is one
        too (AuthenticationError is not tried again). An attempt after a failure sends
        what ``again`` packs when given (the call may have run: a resend's form), else
        ``joined``."""
        failures = 0
        while True:
            try:
                if connect or failures:
                    self.connect()
                elif self._reader is not None:
                    self._check_health()
                replies = self.exchange_all(joined, count)
                for reply in replies:
                    if isinstance(reply, redis.ConnectionError):
                        raise reply
                return replies
            except redis.AuthenticationError:
                raise
            except redis.ConnectionError:
                failures += 1
                if failures >= tries:
                    raise
                self.disconnect()  # the next attempt connects again
                if again is not None:
                    joined, again = again(), None

    def _check_health(self) -> None:
        """redis-py's health check, which its read path would make: after
        ``health_check_interval`` seconds idle, a PING first, so that a connection a NAT or a
        load balancer dropped without a word is replaced before the call is sent."""
        interval = getattr(self.connection, "health_check_interval", 0)
        if interval and time.monotonic() - self._used > interval:
            try:
                self.exchange(packed("PING"))
            except (redis.ConnectionError, redis.TimeoutError):
                self.disconnect()
                self.connect()

    def exchange(self, packed: bytes) -> Any:
        """Send one packed command and return its reply (raise it, when an error): as redis-py
        raises an error reply, a ResponseError, or a ConnectionError for LOADING, NOAUTH and
        the like, which the caller's retry reconnects for."""
        (reply,) = self.exchange_all(packed, 1)
        if isinstance(reply, Exception):
            raise reply
        return reply

    def exchange_all(self, packed: bytes, count: int) -> list[Any]:
        """Send ``packed`` (``count`` commands) and read their replies, an error reply as its
        exception (not raised)."""
        reader, sock = self._reader, getattr(self.connection, "_sock", None)
        replies: list[Any] = []
        if reader is None or sock is None:  # redis-py's read path, or not connected
            self.connection.send_packed_command([packed])
            for _ in range(count):
                try:
                    replies.append(self.connection.read_response())
                except ResponseError as exc:
                    replies.append(exc)
            return replies
        try:
            sock.sendall(packed)
            while len(replies) < count:
                reply = reader.gets()
                if reply is False:  # the reply (or the rest of it) is still on its way
                    data = sock.recv(65536)
                    if not data:
                        raise redis.ConnectionError("Connection closed by server.")
                    reader.feed(data)
                elif not isinstance(reply, PUSHES):
                    replies.append(reply)
                # A RESP3 push (a server's maintenance notice) is not a reply: such hints
                # only speed up a reconnect, which a dropped connection makes anyway.
        except (TimeoutError, BlockingIOError):  # (BlockingIOError: see _kernel_timeouts)
            raise redis.TimeoutError("Timeout reading from socket") from None
        except OSError as exc:
            raise redis.ConnectionError(f"Error while talking to Redis: {exc}") from None
        self._used = time.monotonic()
        return replies


def _kernel_timeouts(sock: socket.socket | None) -> None:
    """Give a plain TCP or Unix socket its timeout as the kernel's SO_RCVTIMEO and
    SO_SNDTIMEO (Linux) and make it blocking for Python: a Python socket with a timeout
    polls before every send and every recv, two system calls per round trip.
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
# RESP3 pushes as hiredis returns them (hiredis 3.2 and later); () with an older hiredis,
# whose RESP3 connections keep redis-py's read path (see _reader_for).
PUSHES: tuple[type, ...] = tuple(
    kind for kind in [getattr(hiredis, "PushNotification", None)] if kind is not None
)


def packed(*command: Any) -> bytes:
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
        or (not PUSHES and str(getattr(connection, "protocol", 2)) == "3")
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


# This process's direct connections, made on first use, closed when the settings change.
connections = OnFirstUse(DirectConnections)


def _all_again(
    commands: list[bytes], again: list[Callable[[], bytes] | None]
) -> Callable[[], bytes] | None:
    """What packs ``commands`` to send after a connection error, each by its ``again``
    when it has one (else as it is); None when none has one."""
    if all(pack is None for pack in again):
        return None
    return lambda: b"".join(
        command if pack is None else pack() for command, pack in zip(commands, again, strict=True)
    )


def _joined(first: bytes, rest: Callable[[], bytes]) -> bytes:
    """``first`` followed by what ``rest`` packs."""
    return first + rest()
