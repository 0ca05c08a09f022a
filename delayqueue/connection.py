"""The Redis client delayqueue uses, created on first use (never at import time)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from redis import Redis
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from delayqueue.conf import get_config
from delayqueue.errors import RedisUnavailable
from delayqueue.keys import GlobalKeys, QueueKeys
from delayqueue.scripts import Scripts

STATS_TTL_SECONDS = 2 * 3600 + 300

_lock = threading.Lock()
_client: Redis | None = None
_raw_client: Redis | None = None
_scripts: Scripts | None = None
_known_queues: set[str] = set()


def _make_client(*, decode: bool) -> Redis:
    config = get_config()
    return Redis.from_url(
        config["REDIS_URL"],
        decode_responses=decode,
        socket_timeout=config["SOCKET_TIMEOUT"],
        socket_connect_timeout=config["SOCKET_TIMEOUT"],
        health_check_interval=30,
    )


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
    global _client, _raw_client, _scripts
    with _lock:
        for client in (_client, _raw_client):
            if client is not None:
                client.close()
        _client, _raw_client, _scripts = None, None, None
        _known_queues.clear()


def queue_keys(queue: str) -> QueueKeys:
    return QueueKeys(get_config()["KEY_PREFIX"], queue)


def global_keys() -> GlobalKeys:
    return GlobalKeys(get_config()["KEY_PREFIX"])


def remember_queue(queue: str) -> None:
    """Add a queue to the set the admin and the worker list (once per process)."""
    if queue not in _known_queues:
        get_redis().sadd(global_keys().queues, queue)
        _known_queues.add(queue)


def run_pipelined(
    calls: list[tuple[Script, list[str], list[Any]]], client: Redis | None = None
) -> list[Any]:
    """Run many script calls in one round trip (EVALSHA), loading a script only when Redis
    has lost it (restart, SCRIPT FLUSH). Errors of single calls come back as exceptions."""
    client = client or get_redis()
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for script, keys, args in calls:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        replies = pipe.execute(raise_on_error=False)
        missing = {
            script.sha: script
            for (script, _, _), reply in zip(calls, replies, strict=True)
            if isinstance(reply, NoScriptError)
        }
        if not missing or attempt:
            return replies
        for script in missing.values():
            client.script_load(script.script)
    return replies


def redis_now_ms(client: Redis | None = None) -> int:
    """Redis's clock (TIME) in epoch ms: the clock every script scores with."""
    seconds, micros = (client or get_redis()).time()
    return int(seconds) * 1000 + int(micros) // 1000


def current_minute() -> int:
    return int(time.time() // 60)


@contextmanager
def redis_errors() -> Iterator[None]:
    """Turn redis-py's connection and timeout errors into RedisUnavailable."""
    try:
        yield
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(
            f"Redis at {_safe_url()} did not answer ({exc}); nothing was changed if the call "
            "raised before Redis replied, and retrying is safe"
        ) from exc


def _safe_url() -> str:
    url: str = get_config()["REDIS_URL"]
    if "@" in url:
        scheme, _, rest = url.partition("://")
        url = f"{scheme}://***@{rest.rpartition('@')[2]}"
    return url
