"""The Redis clients delayqueue uses, created on first use (never at import time), and
forgotten when the settings change. The one place a new kind of client (Sentinel, Cluster)
plugs in: ``client_from_url``.

Redis Sentinel is configured as kombu configures Celery's broker: ``REDIS_URL`` lists the
sentinels, ``sentinel://[user:password@]host[:26379][/db];sentinel://host2...``, the URL's
credentials and database are the master's, ``SENTINEL_MASTER`` is kombu's ``master_name``
and ``SENTINEL_KWARGS`` its ``sentinel_kwargs`` (options of the connections to the sentinels,
their password say). The client is redis-py's ``Sentinel.master_for``: each new connection
asks the sentinels where the master is, and a connection that finds the server it talks to
demoted (READONLY) drops itself, so the next one goes to the new master.

Redis Cluster is ``REDIS_CLUSTER: True`` with ``REDIS_URL`` naming any node: the client is
redis-py's ``RedisCluster``, which learns the slot map from that node, sends each command to
the master of its key's slot, groups a pipeline's commands by node, and follows MOVED
replies and failovers. Every key of a queue carries the hash tag ``{queue}``
(``engine/keys.py``), so each script touches one slot."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import redis
from django.core.signals import setting_changed
from django.dispatch import receiver
from redis import Redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.connection import parse_url, to_bool
from redis.exceptions import RedisClusterException
from redis.retry import Retry
from redis.sentinel import Sentinel

from delayqueue.conf import SETTINGS_READ, get_settings
from delayqueue.engine.keys import global_keys
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.errors import InvalidOption, RedisUnavailable
from delayqueue.redaction import redact_url
from delayqueue.validators import check_sentinel_kwargs

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
        return _sentinel_client(url, sentinel_master, sentinel_kwargs, options)
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
    isinstance check goes through typing's protocol machinery, 0.6 µs a call)."""
    kind = type(client)
    found = _cluster_types.get(kind)
    if found is None:
        found = _cluster_types[kind] = isinstance(client, RedisCluster)
    return found


# ---- Redis Sentinel ------------------------------------------------------------------------

SENTINEL_SCHEME = "sentinel"
SENTINEL_PORT = 26379  # kombu's default for a sentinel:// URL without a port


def is_sentinel_url(url: object) -> bool:
    return str(url).partition("://")[0].strip().lower() == SENTINEL_SCHEME


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``sentinel://`` URL says: the sentinels' addresses, and the options of the
    connections to the master (``db``, ``username``, ``password``, query parameters)."""

    sentinels: list[tuple[str, int]]
    options: dict[str, Any] = field(default_factory=dict)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """kombu's form: one ``sentinel://[user:password@]host[:port][/db][?option=value]`` per
    sentinel, joined by ``;``. As kombu (Celery's broker) does, the credentials, database and
    options are the first part's; a later part may repeat them but not say otherwise (kombu
    would ignore it, and the same URL would mean another database to Celery). A part that
    names no host is refused too. InvalidOption, with the URL redacted, for anything
    unusable."""
    sentinels: list[tuple[str, int]] = []
    options: dict[str, Any] = {}
    for part in str(url).split(";"):
        part = part.strip()
        if not part:
            continue  # "a;b;" or "a;;b"
        shown = redact_url(part)
        scheme, sep, rest = part.partition("://")
        if not sep or scheme.lower() != SENTINEL_SCHEME:
            raise InvalidOption(
                f"REDIS_URL part {shown} is not a sentinel:// URL (a Sentinel REDIS_URL lists "
                "one sentinel://host:port per sentinel, joined by ';')"
            )
        host, port, found = _sentinel_part(rest, shown)
        if not sentinels:
            options = found
        else:
            for name, value in found.items():
                if options.get(name, 0 if name == "db" else None) != value:
                    raise InvalidOption(
                        f"REDIS_URL part {shown} sets {name!r} otherwise than the first part; "
                        "kombu (Celery's broker) reads the credentials, database and options "
                        "of the first sentinel:// part only: write them there"
                    )
        sentinels.append((host, port))
    if not sentinels:
        raise InvalidOption(f"REDIS_URL {redact_url(str(url))} names no sentinel")
    return SentinelTarget(sentinels, options)


def _sentinel_part(rest: str, shown: str) -> tuple[str, int, dict[str, Any]]:
    """(host, port, master connection options) of one part after its ``sentinel://``."""
    try:
        port = urlsplit(f"redis://{rest}").port
        found = parse_url(f"redis://{rest}")
    except ValueError as exc:
        raise InvalidOption(f"REDIS_URL part {shown} is not usable: {exc}") from None
    host = found.pop("host", None)
    if not host:
        raise InvalidOption(f"REDIS_URL part {shown} names no sentinel host")
    if port == 0:
        raise InvalidOption(f"REDIS_URL part {shown} has port 0")
    found.pop("port", None)
    path = unquote(urlsplit(f"redis://{rest}").path).strip("/")
    if path and "db" not in found:
        if not path.isdigit():
            raise InvalidOption(f"REDIS_URL part {shown}: the database must be a number")
        found["db"] = int(path)
    if "ssl" in found:  # a string in the URL; "false" must not turn TLS on
        found["ssl"] = bool(to_bool(found["ssl"]))
    return host, port or SENTINEL_PORT, found


class SentinelRedis(Redis):
    """A client of the master the sentinels name (``Sentinel.master_for``) whose ``close()``
    also closes its connections to the sentinels."""

    sentinel_manager: Sentinel | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            sentinel, self.sentinel_manager = self.sentinel_manager, None
            if sentinel is not None:
                _close_sentinels(sentinel)


def _close_sentinels(sentinel: Sentinel) -> None:
    """``Sentinel.close()``; redis-py before 5.1 has none: its sentinel clients one by one."""
    close = getattr(sentinel, "close", None)
    if close is not None:
        close()
        return
    for client in sentinel.sentinels:
        client.close()


def _sentinel_client(
    url: str,
    master: str | None,
    sentinel_kwargs: Mapping[str, Any] | None,
    options: dict[str, Any],
) -> Redis:
    target = parse_sentinel_url(url)
    if not isinstance(master, str) or not master.strip():
        raise InvalidOption(
            f"REDIS_URL {redact_url(str(url))} is a Sentinel URL: DELAYQUEUE['SENTINEL_MASTER'] "
            "must name the master the sentinels monitor"
        )
    if sentinel_kwargs is not None and not isinstance(sentinel_kwargs, Mapping):
        raise InvalidOption("DELAYQUEUE['SENTINEL_KWARGS'] must be a dict of redis-py options")
    # The sentinels answer within the same timeouts as the master unless told otherwise, and
    # without redis-py's retries (Redis() retries a refused connection 10 times, for seconds):
    # a sentinel that does not answer is skipped for the next one.
    timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
    to_sentinels = {**timeouts, "retry": Retry(NoBackoff(), 0), **(sentinel_kwargs or {})}
    try:
        sentinel = Sentinel(target.sentinels, sentinel_kwargs=to_sentinels)
    except (TypeError, ValueError) as exc:
        raise InvalidOption(f"DELAYQUEUE['SENTINEL_KWARGS'] is not usable: {exc}") from None
    try:
        # the URL's own options win, as Redis.from_url lets them
        client: SentinelRedis = sentinel.master_for(
            master, redis_class=SentinelRedis, **{**options, **target.options}
        )
        client.sentinel_manager = sentinel
        client.connection_pool.make_connection()  # builds it without connecting
    except (TypeError, ValueError) as exc:
        _close_sentinels(sentinel)
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


def check_sentinel_client(kwargs: Any) -> None:
    """Raise InvalidOption, TypeError or ValueError unless ``kwargs`` (SENTINEL_KWARGS) make
    a client for the sentinels themselves; nothing connects."""
    redis.Redis(**check_sentinel_kwargs(kwargs)).close()
