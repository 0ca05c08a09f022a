"""The Redis clients delayqueue uses, created on first use (never at import time), and
forgotten when the settings change. The one place a new kind of client (Sentinel, Cluster)
plugs in: ``client_from_url``.

Redis Sentinel: ``engine/sentinel.py``.

Redis Cluster is ``REDIS_CLUSTER: True`` with ``REDIS_URL`` naming any node: the client is
redis-py's ``RedisCluster``, which learns the slot map from that node, sends each command to
the master of its key's slot, groups a pipeline's commands by node, and follows MOVED
replies and failovers. Every key of a queue carries the hash tag ``{queue}``
(``engine/keys.py``), so each script touches one slot."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar, cast
from urllib.parse import urlsplit

import redis
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis import Redis
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url
from redis.exceptions import RedisClusterException

from delayqueue.conf import SETTINGS_READ, get_settings
from delayqueue.engine.keys import global_keys
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.sentinel import is_sentinel_url, sentinel_client
from delayqueue.errors import InvalidOption, RedisUnavailable
from delayqueue.redaction import redact_url

_lock = threading.Lock()
_clients: dict[bool, Redis] = {}  # decode_responses -> client
_known_queues: set[str] = set()


def _make_client(*, decode: bool) -> Redis:
    config = get_settings()
    return client_from_url(
        config.redis_url,
        cluster=config.redis_cluster,
        sentinel_master=config.sentinel_master,
        sentinel_kwargs=config.sentinel_kwargs,
        **client_options(decode=decode),
    )


def client_options(*, decode: bool) -> dict[str, Any]:
    """The connection options of delayqueue's clients, sync and asyncio alike
    (``engine/async_clients.py``)."""
    config = get_settings()
    return {
        "decode_responses": decode,
        "socket_timeout": config.socket_timeout,
        "socket_connect_timeout": config.socket_timeout,
        "health_check_interval": 30,
    }


def client_from_url(
    url: str,
    *,
    cluster: bool = False,
    sentinel_master: str | None = None,
    sentinel_kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> Redis:
    """A client for ``url``, or InvalidOption when redis-py cannot make a connection of it
    (an unknown query parameter, a bad port; for a ``sentinel://`` URL also no master name,
    no sentinel, bad sentinel options): said at once, not at the first command. Nothing
    connects here, except for a cluster (see ``cluster_client``)."""
    if is_sentinel_url(url):
        if cluster:
            raise InvalidOption(
                "REDIS_CLUSTER is set but REDIS_URL is a sentinel:// URL: a Redis Cluster "
                "fails over by itself; name one of its nodes, redis://host:port/0"
            )
        return sentinel_client(url, sentinel_master, sentinel_kwargs, options)
    if cluster:
        check_cluster_url(url, options)
        return cluster_client(url, options)
    try:
        client = Redis.from_url(url, **options)
        client.connection_pool.make_connection()  # builds it without connecting
    except (TypeError, ValueError) as exc:
        raise InvalidOption(f"REDIS_URL {redact_url(str(url))} is not usable: {exc}") from None
    return client


# ---- Redis Cluster -------------------------------------------------------------------------


def cluster_urls(url: str) -> list[str]:
    """The nodes a cluster's REDIS_URL names: one URL, or several joined by ``;`` (any one
    that answers will do: a client started while the first is down asks the next)."""
    return [part.strip() for part in str(url).split(";") if part.strip()]


def check_cluster_url(url: str, options: Mapping[str, Any] | None = None) -> None:
    """InvalidOption unless ``url`` names nodes as a cluster client can use them: redis://
    or rediss://, database 0 (a cluster has no other), options redis-py knows. Nothing
    connects."""
    parts = cluster_urls(url)
    if not parts:
        raise InvalidOption("REDIS_URL names no cluster node")
    for part in parts:
        shown = redact_url(part)
        if not part.lower().startswith(("redis://", "rediss://")):
            raise InvalidOption(
                f"REDIS_URL {shown} is not a redis:// or rediss:// URL of a cluster node"
            )
        try:
            found = parse_url(part)
            Redis.from_url(part, **(options or {})).connection_pool.make_connection()
        except (TypeError, ValueError) as exc:
            raise InvalidOption(f"REDIS_URL {shown} is not usable: {exc}") from None
        if int(found.get("db") or 0) != 0:
            raise InvalidOption(
                f"REDIS_URL {shown} names database {found['db']}: a Redis Cluster has "
                "database 0 only"
            )


def cluster_client(url: str, options: Mapping[str, Any]) -> Redis:
    """redis-py's ``RedisCluster`` for the nodes ``url`` names (the credentials and options
    are the first URL's). Unlike the other clients it connects at once (to learn the slot
    map): RedisUnavailable when no node answers. Once connected it knows every node, and
    follows failovers whichever nodes the URL named.

    It is typed as ``Redis``: it speaks the same commands, pipelines and pub/sub, and the
    few places that must tell them apart ask ``is_cluster``."""
    options = {k: v for k, v in options.items() if k != "health_check_interval"}
    first, *others = cluster_urls(url)
    more = [ClusterNode(u.hostname or "localhost", u.port or 6379) for u in map(urlsplit, others)]
    try:
        client = ClusterClient.from_url(first, startup_nodes=more, **options)
    except (redis.RedisError, RedisClusterException) as exc:
        raise RedisUnavailable(
            f"Redis Cluster at {redact_url(str(url))} did not answer ({exc})"
        ) from None
    return cast(Redis, client)


class ClusterClient(RedisCluster):
    """redis-py's ``RedisCluster`` whose ``close()`` also closes its connections to the
    nodes: made from a URL, each node's client does not own its pool, so ``close()`` alone
    leaves their sockets to the garbage collector."""

    def close(self) -> None:
        manager = getattr(self, "nodes_manager", None)  # None when __init__ failed
        nodes = list(manager.nodes_cache.values()) if manager is not None else []
        try:
            super().close()
        finally:
            for node in nodes:
                if node.redis_connection is not None:
                    node.redis_connection.connection_pool.disconnect()


_cluster_types: dict[type, bool] = {}


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a cluster client (by its type, remembered: RedisCluster's
    isinstance check goes through typing's protocol machinery on every call)."""
    kind = type(client)
    found = _cluster_types.get(kind)
    if found is None:
        found = _cluster_types[kind] = isinstance(client, RedisCluster)
    return found


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


class _Closable(Protocol):
    def close(self) -> None: ...


_Built = TypeVar("_Built", bound=_Closable)


class OnFirstUse(Generic[_Built]):
    """One ``build(get_redis())`` per process, made on the first call and closed and forgotten
    on ``reset()``: the direct connections of ``direct.py`` and ``cluster_direct.py``.
    ``made`` is the one made, or None."""

    __slots__ = ("_build", "_lock", "made")

    def __init__(self, build: Callable[[Redis], _Built]) -> None:
        self._build = build
        self._lock = threading.Lock()
        self.made: _Built | None = None
        on_reset(self.forget)

    def __call__(self) -> _Built:
        made = self.made
        if made is not None:
            return made
        client = get_redis()  # before the lock, which get_redis() takes itself
        with self._lock:
            if self.made is None:
                self.made = self._build(client)
            return self.made

    def forget(self) -> None:
        with self._lock:
            made, self.made = self.made, None
        if made is not None:
            made.close()


@receiver(setting_changed)
def _reset_on_settings_change(*, setting: str, **kwargs: Any) -> None:
    if setting in SETTINGS_READ:
        reset()


def remember_queue(queue: str) -> None:
    """Add a queue to the set the admin and the worker list (once per process)."""
    if queue not in _known_queues:
        with redis_errors():
            get_redis().sadd(global_keys().queues, queue)
        _known_queues.add(queue)


def queue_remembered(queue: str) -> bool:
    """Whether this process has added ``queue`` to the registry (``remember_queue``)."""
    return queue in _known_queues


def queue_added(queue: str) -> None:
    """Note that ``queue`` is in the registry (the asyncio client added it)."""
    _known_queues.add(queue)


def redis_now_ms(client: Redis | None = None) -> int:
    """Redis's clock (TIME) in epoch ms: the clock every script scores with."""
    seconds, micros = (client or get_redis()).time()
    return int(seconds) * 1000 + int(micros) // 1000
