"""The Redis clients delayqueue uses, created on first use (never at import time), and
forgotten when the settings change. The one place a new kind of client (Sentinel, Cluster)
plugs in: ``client_from_url``."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from redis import Redis

from delayqueue.conf import get_settings
from delayqueue.engine.keys import global_keys
from delayqueue.errors import InvalidOption
from delayqueue.redaction import redact_url

_lock = threading.Lock()
_clients: dict[bool, Redis] = {}  # decode_responses -> client
_known_queues: set[str] = set()


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
    """The client for scripts and plain commands: replies decoded as UTF-8 text."""
    return _client_of(decode=True)


def get_raw_redis() -> Redis:
    """A client that returns bytes: for reading job data that may not be valid UTF-8."""
    return _client_of(decode=False)


def _client_of(*, decode: bool) -> Redis:
    client = _clients.get(decode)
    if client is None:
        with _lock:
            client = _clients.get(decode)
            if client is None:
                client = _clients[decode] = _make_client(decode=decode)
    return client


def reset() -> None:
    """Forget the clients and all that was built on them (settings changed, or tests)."""
    with _lock:
        for client in _clients.values():
            client.close()
        _clients.clear()
        _known_queues.clear()
    for forget in _on_reset:
        forget()


_on_reset: list[Callable[[], None]] = []


def on_reset(forget: Callable[[], None]) -> Callable[[], None]:
    """Register ``forget`` to run on ``reset()``: a module that keeps something made from
    the clients (registered scripts, direct connections) drops it then."""
    _on_reset.append(forget)
    return forget


@receiver(setting_changed)
def _reset_on_settings_change(*, setting: str, **kwargs: Any) -> None:
    if setting in ("DELAYQUEUE", "CELERY_BROKER_URL"):
        reset()


def remember_queue(queue: str) -> None:
    """Add a queue to the set the admin and the worker list (once per process)."""
    if queue not in _known_queues:
        get_redis().sadd(global_keys().queues, queue)
        _known_queues.add(queue)


def redis_now_ms(client: Redis | None = None) -> int:
    """Redis's clock (TIME) in epoch ms: the clock every script scores with."""
    seconds, micros = (client or get_redis()).time()
    return int(seconds) * 1000 + int(micros) // 1000
