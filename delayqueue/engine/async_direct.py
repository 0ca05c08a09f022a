"""One shared connection per event loop for the calls that are safe to send twice
(``ScriptCall.resend_safe``: ``adelay_for``'s enqueue), as ``execution.run_direct`` is for
the sync API.

redis-py's asyncio client takes a connection from its pool per command (a connection per
concurrent call: a round trip and a wake-up of its own for each) and spends most of a call's
CPU on its Python command packing and per-command timeouts. Here every call on the loop is
written to one connection, without waiting for the replies before it (Redis answers a
connection's commands in order): at once when nothing is in flight, else with the others of
the same turn of the loop. The link takes the connection's transport over as its protocol
(``transport.set_protocol``): replies are parsed with hiredis in ``data_received`` and handed
to their callers in order, with no reader task between, so an awaited call costs two turns
of the loop. A hundred concurrent calls share a few reads and writes.

The connection is redis-py's own (``connect()`` does TLS, AUTH/ACL users, HELLO, SELECT),
and only for a plain ``redis.asyncio.Redis`` (not Sentinel's connections, which turn
READONLY into a reconnect, nor a cluster's): those take redis-py's path. A connection that
fails (closed, reset, no reply within the socket timeout) fails every call waiting on it;
calls whose connection closed are sent again on a new one (they are safe to resend), at
most twice; a timeout is raised, as the sync direct connection raises it. A script
Redis lost (NOSCRIPT) is loaded once and the call sent again."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

import hiredis
import redis
from redis._parsers import BaseParser
from redis.asyncio.connection import Connection, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import InvalidResponse, NoScriptError

from delayqueue.engine.direct import PUSHES, packed

_PLAIN = (Connection, SSLConnection, UnixDomainSocketConnection)


def usable(client: Any) -> bool:
    """Whether ``client`` (a redis.asyncio client) makes connections this module can share."""
    pool = getattr(client, "connection_pool", None)
    kind = getattr(pool, "connection_class", None)
    if kind not in _PLAIN or pool is None:
        return False
    protocol = str(pool.connection_kwargs.get("protocol", 2))
    return protocol != "3" or bool(PUSHES)


class SharedConnection:
    """The loop's shared connection, opened at the first call and again after a failure."""

    def __init__(self, client: Any) -> None:
        pool = client.connection_pool
        self._make = lambda: pool.connection_class(**pool.connection_kwargs)
        self._kwargs = pool.connection_kwargs
        timeout = self._kwargs.get("socket_timeout")
        self._timeout = float(timeout) if timeout else None
        interval = self._kwargs.get("health_check_interval") or 0
        self._idle_limit = float(interval) or None
        self._link: _Link | None = None
        self._opening: asyncio.Future[_Link] | None = None
        self._closed = False

    async def call(self, sha: str, source: Any, keys: list[Any], args: list[Any]) -> Any:
        """EVALSHA on the shared connection: the reply, or raise the error Redis replied."""
        command = packed("EVALSHA", sha, len(keys), *keys, *args)
        failures, loaded = 0, False
        while True:
            try:
                link = await self._link_now()
                reply = await link.send(command)
            except redis.AuthenticationError:
                raise
            except redis.ConnectionError:  # (a timeout is raised: the call may have run)
                failures += 1
                if failures == 3:
                    raise
                continue
            if isinstance(reply, NoScriptError) and not loaded:
                loaded = True
                await link.send(packed("SCRIPT", "LOAD", source))
                continue
            if isinstance(reply, Exception):
                raise reply
            return reply

    async def _link_now(self) -> _Link:
        link = self._link
        if link is not None and link.usable(self._idle_limit):
            return link
        if link is not None:
            self._link = None
            await link.close()
        if self._opening is None:  # the first caller opens it; the others wait for it
            self._opening = asyncio.get_running_loop().create_future()
            opening = self._opening
            try:
                connection = self._make()
                await connection.connect()
                self._link = _Link(connection, self._timeout)
                opening.set_result(self._link)
            except BaseException as exc:
                opening.set_exception(exc)
                opening.exception()  # (retrieved: only the waiters raise it)
                raise
            finally:
                self._opening = None
            return self._link
        return await asyncio.shield(self._opening)

    async def close(self) -> None:
        self._closed = True
        link, self._link = self._link, None
        if link is not None:
            await link.close()


class _Link(asyncio.Protocol):
    """One connected connection whose transport this object takes over as its protocol:
    calls written as they come, replies parsed in ``data_received`` and handed to their
    callers in order, with no reader task between (a reply costs one turn of the loop)."""

    def __init__(self, connection: Any, timeout: float | None) -> None:
        self.connection = connection
        encoder = connection.encoder
        decoding = (
            {"encoding": encoder.encoding, "errors": encoder.encoding_errors}
            if encoder.decode_responses
            else {}
        )
        self.parser = hiredis.Reader(
            protocolError=InvalidResponse, replyError=BaseParser.parse_error, **decoding
        )
        self.waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self.timeout = timeout
        self.timer: asyncio.TimerHandle | None = None
        self.outgoing: list[bytes] = []
        self.failed: BaseException | None = None
        self.used = time.monotonic()
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport = connection._writer.transport
        leftover = bytes(getattr(connection._reader, "_buffer", b""))  # (none after HELLO)
        self.transport.set_protocol(self)
        if leftover:
            self.parser.feed(leftover)

    def usable(self, idle_limit: float | None) -> bool:
        """Not failed, and not idle past the health-check interval (a connection a NAT or
        a load balancer may have dropped without a word: a new one instead of a PING)."""
        if self.failed is not None:
            return False
        return not (idle_limit and not self.waiting and time.monotonic() - self.used > idle_limit)

    def send(self, packed: bytes) -> asyncio.Future[Any]:
        if self.failed is not None:
            raise redis.ConnectionError(f"Error while talking to Redis: {self.failed}")
        future = self.loop.create_future()
        self.waiting.append((future, time.monotonic()))
        if self.timeout is not None and self.timer is None:
            self.timer = self.loop.call_later(self.timeout, self._check_timeout)
        if len(self.waiting) == 1:  # nothing in flight: written at once
            self._write([packed])
            return future
        # Calls made while others are in flight go out together, once per turn of the loop.
        if not self.outgoing:
            self.loop.call_soon(self._flush)
        self.outgoing.append(packed)
        return future

    def _flush(self) -> None:
        outgoing, self.outgoing = self.outgoing, []
        if self.failed is None and outgoing:
            self._write(outgoing)

    def _write(self, packed: list[bytes]) -> None:
        try:
            self.transport.write(b"".join(packed))
        except Exception as exc:  # a transport closed under it: the calls fail over
            self._fail(_connection_error(exc))

    # asyncio.Protocol: called by the loop when Redis replies or the connection ends.
    def data_received(self, data: bytes) -> None:
        parser, waiting = self.parser, self.waiting
        parser.feed(data)
        try:
            while (reply := parser.gets()) is not False:
                if isinstance(reply, PUSHES):
                    continue  # a RESP3 push (a server's notice) is not a reply
                if not waiting:
                    raise InvalidResponse("a reply nobody asked for")
                future, _ = waiting.popleft()
                if not future.done():
                    future.set_result(reply)
        except Exception as exc:
            self._fail(exc if isinstance(exc, redis.RedisError) else _connection_error(exc))
            return
        self.used = time.monotonic()

    def eof_received(self) -> bool:
        self._fail(redis.ConnectionError("Connection closed by server."))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(_connection_error(exc) if exc else redis.ConnectionError("Connection closed."))

    def _check_timeout(self) -> None:
        """Fail the connection when its oldest call has waited a socket timeout."""
        self.timer = None
        if not self.waiting or self.timeout is None:
            return
        waited = time.monotonic() - self.waiting[0][1]
        if waited >= self.timeout:
            self._fail(redis.TimeoutError("Timeout reading from socket"))
        else:
            self.timer = self.loop.call_later(self.timeout - waited, self._check_timeout)

    def _fail(self, error: BaseException) -> None:
        if self.failed is None:
            self.failed = error
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        while self.waiting:
            future, _ = self.waiting.popleft()
            if not future.done():
                future.set_exception(error)
        self.transport.abort()  # at once: no reply can be matched to its call now

    async def close(self) -> None:
        if self.failed is None:
            self._fail(redis.ConnectionError("connection closed"))
        # The transport is aborted, and its protocol is this object, not the stream's:
        # redis-py's disconnect() would wait for the stream to hear of it, which it never does.
        self.connection._close()


def _connection_error(exc: BaseException) -> redis.ConnectionError:
    return redis.ConnectionError(f"Error while talking to Redis: {exc}")
