"""Several script calls in one round trip on a direct connection of our own, beside redis-py's
pool, as ``direct.py`` sends one (``run_many_direct``): what the Celery side sends together,
a job's begin and the call that rides with it, a job's ack with what rides before it
(delayqueue/runner/riders.py), a batch's begins or its settling. Only for calls that are all
safe to send twice (``ScriptCall.resend_safe``): a connection Redis dropped while it sat idle
is replaced and the whole round trip sent again. Where that cannot be (a call not safe to
resend, a Redis Cluster, a durable write and its WAIT) it is ``execution.run_many``.

What it leaves out of redis-py's pipeline, per round trip: the Pipeline object, the pool's
checkout (a lock and a poll for stray data), and per call redis-py's pass over each argument
and its reply path (response callbacks, the retry wrapper); the calls are packed by hiredis
and their replies read with the link's own hiredis reader (``direct._Link``).

Order: the calls run in the order given, one after another, on one connection. A script this
process has not used here yet is loaded in the same round trip, before the calls (``SCRIPT
LOAD`` first), so no call is refused for a script Redis never saw while a later one runs (a
Django task's outcome before its ack). Redis losing its scripts later (a restart, ``SCRIPT
FLUSH``) refuses the calls of the next round trip; those are sent again after their scripts
are loaded, as ``execution.run_pipelined`` does.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
from hiredis import pack_command
from redis import Redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError, ResponseError

from delayqueue.engine import direct
from delayqueue.engine.clients import get_redis, is_cluster, on_reset
from delayqueue.engine.execution import get_scripts, run_many
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.run_steps import durability, read_replies
from delayqueue.engine.transitions import ScriptCall

_lock = threading.Lock()
_pipelines: DirectPipelines | None = None
_loaded: set[str] = set()  # the SHAs this process has loaded on its Redis (SCRIPT LOAD)
# RESP3 pushes as hiredis returns them (see direct.py); () where this hiredis has none.
_PUSH: Any = getattr(hiredis, "PushNotification", None) or ()


@on_reset
def _forget() -> None:
    global _pipelines
    with _lock:
        if _pipelines is not None:
            _pipelines.close()
        _pipelines = None
        _loaded.clear()


def run_many_direct(calls: Sequence[ScriptCall[Any]]) -> list[Any]:
    """Run ``calls`` in one round trip, in order; each item of the result is the call's read
    reply, or the DelayQueueError its script raised (the other calls still ran), as
    ``execution.run_many`` (not strict: a durable write's WAIT is run_many's)."""
    if not calls:
        return []
    if (
        not all(call.resend_safe for call in calls)
        or is_cluster(get_redis())
        or durability(None) is not None
    ):
        return run_many(calls)
    scripts = get_scripts()
    with redis_errors():
        replies = _run(pipelines(), [scripts[call.script] for call in calls], calls)
    return read_replies(calls, replies)


def _run(
    pipes: DirectPipelines, scripts: list[Script], calls: Sequence[ScriptCall[Any]]
) -> list[Any]:
    commands = [
        _packed("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args)
        for script, call in zip(scripts, calls, strict=True)
    ]
    new = {script.sha: script for script in scripts if script.sha not in _loaded}
    replies = pipes.run(_loads(new.values()) + commands)
    loads, replies = replies[: len(new)], replies[len(new) :]
    _loaded.update(sha for sha, reply in zip(new, loads, strict=True) if reply == sha)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:  # Redis lost its scripts since: load them, send again what it refused
        lost = {scripts[i].sha: scripts[i] for i in missing}
        again = pipes.run(_loads(lost.values()) + [commands[i] for i in missing])
        _loaded.update(sha for sha, reply in zip(lost, again, strict=False) if reply == sha)
        for i, reply in zip(missing, again[len(lost) :], strict=True):
            replies[i] = reply
    return replies


def _loads(scripts: Any) -> list[bytes]:
    return [_packed("SCRIPT", "LOAD", script.script) for script in scripts]


def _packed(*command: Any) -> bytes:
    return pack_command(command)


class DirectPipelines:
    """Connections of our own for several calls per round trip (``direct.DirectConnections``
    for one): an idle one is popped off a list and pushed back after its replies (atomic
    under the GIL, so threads share the list); a forked child starts with none."""

    def __init__(self, client: Redis) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._kwargs = pool.connection_kwargs
        self._idle: list[_PipelinedLink] = []
        self._pid = os.getpid()

    def run(self, commands: list[bytes]) -> list[Any]:
        """Send the packed ``commands`` at once and read a reply for each (an error reply as
        its exception, not raised). Only for commands that can run twice: a connection Redis
        dropped while it sat idle is replaced and all of them sent again."""
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()
        try:
            link, new = self._idle.pop(), False
        except IndexError:
            link, new = _PipelinedLink(self._connection_class(**self._kwargs)), True
        try:
            replies = link.call_all(commands, connect=new)
        except BaseException:
            link.disconnect()
            raise
        self._idle.append(link)
        return replies

    def open(self) -> None:
        """Connect one idle connection ahead of the first round trip."""
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()
        if not self._idle:
            link = _PipelinedLink(self._connection_class(**self._kwargs))
            link.connect()
            self._idle.append(link)

    def close(self) -> None:
        idle, self._idle = self._idle, []
        if self._pid == os.getpid():
            for link in idle:
                link.disconnect()


class _PipelinedLink(direct._Link):
    """A direct connection (``direct._Link``: it connects, checks its health after an idle
    spell, reads its socket with hiredis) that sends several commands at once."""

    __slots__ = ()

    def call_all(self, commands: list[bytes], *, connect: bool) -> list[Any]:
        packed, failures = b"".join(commands), 0
        while True:
            try:
                if connect or failures:
                    self.connect()
                elif self._reader is not None:
                    self._check_health()
                replies = self.exchange_all(packed, len(commands))
                for reply in replies:
                    # LOADING, NOAUTH and the like: the connection is not usable, as
                    # direct.py's exchange raises them (AuthenticationError is not retried)
                    if isinstance(reply, redis.ConnectionError):
                        raise reply
                return replies
            except redis.AuthenticationError:
                raise
            except redis.ConnectionError:
                failures += 1
                if failures == 3:
                    raise
                self.disconnect()  # the next attempt connects again

    def exchange_all(self, packed: bytes, count: int) -> list[Any]:
        """Send ``packed`` (``count`` commands) and read their replies."""
        reader, sock = self._reader, getattr(self.connection, "_sock", None)
        replies: list[Any] = []
        if reader is None or sock is None:  # redis-py's read path (a Sentinel's connection)
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
                if reply is False:  # the rest is still on its way
                    data = sock.recv(65536)
                    if not data:
                        raise redis.ConnectionError("Connection closed by server.")
                    reader.feed(data)
                elif not isinstance(reply, _PUSH):  # (a RESP3 push is no reply: direct.py)
                    replies.append(reply)
        except (TimeoutError, BlockingIOError):  # (BlockingIOError: direct._kernel_timeouts)
            raise redis.TimeoutError("Timeout reading from socket") from None
        except OSError as exc:
            raise redis.ConnectionError(f"Error while talking to Redis: {exc}") from None
        self._used = time.monotonic()
        return replies


def pipelines() -> DirectPipelines:
    global _pipelines
    if _pipelines is None:
        client = get_redis()  # before the lock, which get_redis() takes itself
        with _lock:
            if _pipelines is None:
                _pipelines = DirectPipelines(client)
    return _pipelines


def warm_up() -> None:
    """Connect one now where ``run_many_direct`` uses them (a new Celery pool process): the
    first job's round trip does not pay for it."""
    if not is_cluster(get_redis()) and durability(None) is None:
        with redis_errors():
            pipelines().open()
