"""The Redis client delayqueue uses, created on first use (never at import time)."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

import redis
from django.core.signals import setting_changed
from django.dispatch import receiver
from hiredis import pack_command
from redis import Redis
from redis.commands.core import Script
from redis.connection import AbstractConnection
from redis.exceptions import NoScriptError

from delayqueue.conf import get_settings
from delayqueue.engine.keys import STATS_TTL_SECONDS as STATS_TTL_SECONDS
from delayqueue.engine.keys import GlobalKeys, QueueKeys
from delayqueue.engine.keys import current_minute as current_minute
from delayqueue.engine.scripts import Scripts
from delayqueue.engine.transitions import ReplyT, ScriptCall
from delayqueue.errors import (
    DelayQueueError,
    InvalidOption,
    RedisError,
    RedisLoading,
    RedisMisconfigured,
    RedisOutOfMemory,
    RedisPermissionDenied,
    RedisReadOnly,
    RedisUnavailable,
)
from delayqueue.redaction import redact_url

_lock = threading.Lock()
_client: Redis | None = None
_raw_client: Redis | None = None
_scripts: Scripts | None = None
_known_queues: set[str] = set()
_direct: DirectConnections | None = None


def _make_client(*, decode: bool) -> Redis:
    config = get_settings()
    return client_from_url(
        config.redis_url,
        decode_responses=decode,
        socket_timeout=config.socket_timeout,
        socket_connect_timeout=config.socket_timeout,
        health_check_interval=30,
    )


def client_from_url(url: str, **options: Any) -> Redis:
    """A client for ``url``, or InvalidOption when redis-py cannot make a connection of it
    (an unknown query parameter, a bad port): said at once, not at the first command."""
    try:
        client = Redis.from_url(url, **options)
        client.connection_pool.make_connection()  # builds it without connecting
    except (TypeError, ValueError) as exc:
        raise InvalidOption(f"REDIS_URL {redact_url(str(url))} is not usable: {exc}") from None
    return client


def get_redis() -> Redis:
    global _client
    if _client is None:
        with _lock:
            if _client is None:
                _client = _make_client(decode=True)
    return _client


def get_raw_redis() -> Redis:
    """A client that returns bytes: for reading job data that may not be valid UTF-8."""
    global _raw_client
    if _raw_client is None:
        with _lock:
            if _raw_client is None:
                _raw_client = _make_client(decode=False)
    return _raw_client


def get_scripts() -> Scripts:
    global _scripts
    if _scripts is None:
        _scripts = Scripts(get_redis())
    return _scripts


def reset() -> None:
    """Forget the client (settings changed, or tests)."""
    global _client, _raw_client, _scripts, _direct
    with _lock:
        for client in (_client, _raw_client):
            if client is not None:
                client.close()
        if _direct is not None:
            _direct.close()
        _client, _raw_client, _scripts, _direct = None, None, None, None
        _known_queues.clear()


@receiver(setting_changed)
def _reset_on_settings_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DELAYQUEUE", "CELERY_BROKER_URL"):
        reset()


def queue_keys(queue: str) -> QueueKeys:
    return QueueKeys(get_settings().key_prefix, queue)


def global_keys() -> GlobalKeys:
    return GlobalKeys(get_settings().key_prefix)


def remember_queue(queue: str) -> None:
    """Add a queue to the set the admin and the worker list (once per process)."""
    if queue not in _known_queues:
        get_redis().sadd(global_keys().queues, queue)
        _known_queues.add(queue)


def run(call: ScriptCall[ReplyT], client: Redis | None = None) -> ReplyT:
    """Run one script call (EVALSHA, loading the script when Redis lost it) and read its
    reply; Redis's errors as delayqueue's (see ``translate``)."""
    script = get_scripts()[call.script]
    with redis_errors():
        reply = script(keys=call.keys, args=call.args, client=client or get_redis())
    return call.parse(reply)


def run_many(calls: Sequence[ScriptCall[Any]], client: Redis | None = None) -> list[Any]:
    """Run many script calls in one round trip; each item of the result is the call's read
    reply, or the DelayQueueError its script raised (the other calls still ran)."""
    if not calls:
        return []
    scripts = get_scripts()
    with redis_errors():
        replies = run_pipelined([(scripts[c.script], c.keys, c.args) for c in calls], client)
    return [
        translate(reply) if isinstance(reply, Exception) else call.parse(reply)
        for call, reply in zip(calls, replies, strict=True)
    ]


def run_all(calls: Sequence[ScriptCall[Any]], client: Redis | None = None) -> list[Any]:
    """``run_many``, raising the first error instead of returning it."""
    replies = run_many(calls, client)
    for reply in replies:
        if isinstance(reply, DelayQueueError):
            raise reply
    return replies


def run_pipelined(
    calls: list[tuple[Script, list[str], list[Any]]], client: Redis | None = None
) -> list[Any]:
    """Run many script calls in one round trip (EVALSHA), loading a script only when Redis
    has lost it (restart, SCRIPT FLUSH). Errors of single calls come back as exceptions.

    Only the calls Redis refused for a missing script are sent again: the others already
    ran, and running them twice would lose their replies (a claim's jobs, say)."""
    client = client or get_redis()
    replies = _execute(client, calls)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:
        for script in {calls[i][0].sha: calls[i][0] for i in missing}.values():
            client.script_load(script.script)
        for i, reply in zip(missing, _execute(client, [calls[i] for i in missing]), strict=True):
            replies[i] = reply
    return replies


def _execute(client: Redis, calls: list[tuple[Script, list[str], list[Any]]]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for script, keys, args in calls:
        pipe.evalsha(script.sha, len(keys), *keys, *args)
    return pipe.execute(raise_on_error=False)


class DirectConnections:
    """Connections of our own for one script call per round trip, beside the client's pool.

    redis-py spends about 10 µs of CPU per command on its pool (a poll for stray data on
    every checkout), retries and instrumentation: as much as the rest of ``delay_for``
    together. Here an idle connection is popped off a list and pushed back after its reply
    (both atomic under the GIL, so threads share the list safely); a forked child starts
    with an empty list and never touches its parent's sockets.
    """

    def __init__(self, client: Redis) -> None:
        pool = client.connection_pool
        self._connection_class = pool.connection_class
        self._kwargs = pool.connection_kwargs
        self._idle: list[AbstractConnection] = []
        self._pid = os.getpid()

    def run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        """EVALSHA ``script``, loading it when Redis lost it. Only for scripts that can run
        twice with the same arguments: a connection Redis dropped while it sat idle is
        replaced and the call sent again."""
        if self._pid != os.getpid():
            self._idle, self._pid = [], os.getpid()
        try:
            connection = self._idle.pop()
        except IndexError:
            connection = self._connection_class(**self._kwargs)
        try:
            reply = self._call(connection, script, keys, args)
        except BaseException:
            connection.disconnect()
            raise
        self._idle.append(connection)
        return reply

    def close(self) -> None:
        idle, self._idle = self._idle, []
        if self._pid == os.getpid():
            for connection in idle:
                connection.disconnect()

    @staticmethod
    def _call(
        connection: AbstractConnection, script: Script, keys: list[str], args: list[Any]
    ) -> Any:
        for attempt in range(3):
            try:
                command = ("EVALSHA", script.sha, len(keys), *keys, *args)
                # hiredis (a dependency) packs it without redis-py's pass over each argument
                connection.send_packed_command([pack_command(command)])
                return connection.read_response()
            except NoScriptError:
                if attempt == 2:
                    raise
                connection.send_command("SCRIPT", "LOAD", script.script)
                connection.read_response()
            except redis.AuthenticationError:
                raise
            except redis.ConnectionError:
                if attempt == 2:
                    raise
                connection.disconnect()  # the next send connects again
        raise AssertionError("unreachable")


def run_direct(call: ScriptCall[ReplyT]) -> ReplyT:
    """One script call on a connection of ``DirectConnections`` (same server and settings
    as ``get_redis()``): only for calls safe to resend (``ScriptCall.resend_safe``)."""
    global _direct
    if not call.resend_safe:
        raise ValueError(f"the {call.script} script is not safe to send twice")
    if _direct is None:
        client = get_redis()  # before the lock, which get_redis() takes itself
        with _lock:
            if _direct is None:
                _direct = DirectConnections(client)
    with redis_errors():
        reply = _direct.run(get_scripts()[call.script], call.keys, call.args)
    return call.parse(reply)


def redis_now_ms(client: Redis | None = None) -> int:
    """Redis's clock (TIME) in epoch ms: the clock every script scores with."""
    seconds, micros = (client or get_redis()).time()
    return int(seconds) * 1000 + int(micros) // 1000


class _RedisErrors:
    """``with redis_errors():`` turns redis-py's errors into delayqueue's: connection and
    timeout errors into RedisUnavailable, error replies into RedisError subclasses (see
    ``translate``). (A class, not @contextmanager: it wraps every call to Redis.)"""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        if isinstance(exc, redis.RedisError):
            raise translate(exc) from exc


_REDIS_ERRORS = _RedisErrors()


def redis_errors() -> _RedisErrors:
    return _REDIS_ERRORS


# Error reply prefixes an operator can act on, and what delayqueue raises for each.
_REPLY_ERRORS: dict[str, type[DelayQueueError]] = {
    "OOM": RedisOutOfMemory,
    "READONLY": RedisReadOnly,
    "NOPERM": RedisPermissionDenied,
    "MISCONF": RedisMisconfigured,
    "LOADING": RedisLoading,
}


def translate(exc: BaseException) -> DelayQueueError:
    """The DelayQueueError for an error redis-py raised or a pipeline returned."""
    if isinstance(exc, DelayQueueError):
        return exc
    text = str(exc)
    # A script's error reply starts with the script's own words; the code is the first word
    # of redis's reply (redis-py strips it for the classes it knows).
    for code, error in _REPLY_ERRORS.items():
        if text.startswith(code) or isinstance(exc, _KNOWN.get(code, ())):
            return error(f"Redis at {safe_url()} refused the command ({code}): {text}")
    if "can't run this command" in text or "no permissions to access" in text:
        return RedisPermissionDenied(f"Redis at {safe_url()} refused the command (NOPERM): {text}")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return RedisUnavailable(
            f"Redis at {safe_url()} did not answer ({text}); nothing was changed if the "
            "call raised before Redis replied, and retrying is safe"
        )
    return RedisError(f"Redis at {safe_url()} answered with an error: {text}")


_KNOWN: dict[str, type[BaseException] | tuple[type[BaseException], ...]] = {
    "OOM": redis.exceptions.OutOfMemoryError,
    "READONLY": redis.exceptions.ReadOnlyError,
    "NOPERM": redis.exceptions.NoPermissionError,
    "LOADING": redis.exceptions.BusyLoadingError,
}


def safe_url() -> str:
    return redact_url(str(get_settings().redis_url))
