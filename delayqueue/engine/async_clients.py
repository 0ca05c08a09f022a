"""The asyncio clients: redis.asyncio's own ``Redis``, ``RedisCluster`` and Sentinel
``master_for``, made from the same settings, URL rules and options as the sync clients
(``engine/clients.py``), one set per event loop and process.

A redis.asyncio connection belongs to the loop it was opened on ("attached to a different
loop" on any other), so the clients are kept per running loop, in a dictionary keyed weakly
by the loop. Nothing outlives its loop: the first use on a loop starts an async generator
that the loop's own ``shutdown_asyncgens()`` finalises when it ends (``asyncio.run``,
asgiref's ``async_to_sync``, uvicorn and the rest all call it), and its ``finally`` closes
the loop's clients there, on that loop. A loop closed without it has its entry dropped at
the next use of any loop. Settings changed (``clients.reset()``): each loop closes its
clients at its next use and makes new ones. In a forked child, a parent's clients are
never used nor closed (their sockets are the parent's); the child makes its own."""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import RedisClusterException

from delayqueue.conf import get_settings
from delayqueue.engine.async_direct import SharedConnection, usable
from delayqueue.engine.clients import (
    check_cluster_url,
    client_options,
    cluster_urls,
    get_redis,
    on_reset,
    queue_added,
    queue_remembered,
)
from delayqueue.engine.keys import global_keys
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.scripts import load_source
from delayqueue.engine.sentinel import is_sentinel_url, parse_sentinel_url
from delayqueue.errors import InvalidOption, RedisUnavailable
from delayqueue.redaction import redact_url


@dataclass(eq=False)
class LoopClients:
    """One loop's clients: ``client`` (replies decoded as UTF-8, as ``get_redis()``'s) and
    the scripts registered on it, by name."""

    client: Any  # redis.asyncio Redis or RedisCluster (see ``is_async_cluster``)
    cluster: bool
    generation: int
    pid: int
    sentinel: Sentinel | None = None
    scripts: dict[str, AsyncScript] = field(default_factory=dict)
    closer: Any = None  # the async generator the loop's shutdown_asyncgens() finalises
    closed: bool = False
    direct: SharedConnection | None = None  # for calls safe to resend (engine/async_direct.py)
    starting: asyncio.Future[None] | None = None  # until the first call has made them ready

    def script(self, name: str) -> AsyncScript:
        found = self.scripts.get(name)
        if found is None:
            found = self.scripts[name] = self.client.register_script(_source(name))
        return found

    async def aclose(self) -> None:
        if self.closed or self.pid != os.getpid():  # (a parent's: its sockets, not ours)
            return
        self.closed = True
        try:
            if self.direct is not None:
                await self.direct.close()
            await self.client.aclose()
        finally:
            if self.sentinel is not None:
                await _close_sentinels(self.sentinel)


async def _close_sentinels(sentinel: Sentinel) -> None:
    """``Sentinel.aclose()``; redis-py before 5.1 has none: its sentinel clients one by one."""
    close = getattr(sentinel, "aclose", None)
    if close is not None:
        await close()
        return
    for client in sentinel.sentinels:
        await client.aclose()


_sources: dict[str, str] = {}


def _source(name: str) -> str:
    found = _sources.get(name)
    if found is None:
        found = _sources[name] = load_source(name)
    return found


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopClients] = (
    weakref.WeakKeyDictionary()
)
_generation = 0
_parents: list[LoopClients] = []  # after a fork: the parent's, kept so nothing closes them


@on_reset
def _forget() -> None:
    """Settings changed: every loop makes new clients at its next use (and closes its old
    ones there, on their own loop)."""
    global _generation
    _generation += 1


async def loop_clients() -> LoopClients:
    """The running loop's clients, made at its first use (the calls that come meanwhile
    wait for them to be ready: a cluster client learns its slot map first)."""
    loop = asyncio.get_running_loop()
    found = _by_loop.get(loop)
    if found is not None and found.generation == _generation and found.pid == os.getpid():
        if found.starting is not None:
            await asyncio.shield(found.starting)
        return found
    if found is not None:
        if found.pid != os.getpid():
            _parents.append(found)  # the parent's sockets: neither used nor closed here
        else:
            await _close(found)
    _drop_closed_loops()
    made = _make()
    _by_loop[loop] = made
    made.starting = starting = loop.create_future()
    made.closer = _close_at_loop_end(made)
    try:
        await made.closer.__anext__()  # the loop now knows it (sys.set_asyncgen_hooks)
        if made.cluster:
            await _learn_slots(made)
    except BaseException as exc:
        starting.set_exception(exc)
        starting.exception()  # (retrieved: the waiters raise it)
        await _close(made)
        raise
    made.starting = None
    starting.set_result(None)
    return made


async def _learn_slots(made: LoopClients) -> None:
    """The cluster's slot map, as the sync client learns it when made."""
    try:
        await made.client.initialize()
    except (redis.RedisError, RedisClusterException) as exc:
        raise RedisUnavailable(
            f"Redis Cluster at {redact_url(str(get_settings().redis_url))} did not answer ({exc})"
        ) from None


async def _close_at_loop_end(clients: LoopClients) -> AsyncIterator[None]:
    """Suspended until the loop's ``shutdown_asyncgens()`` (or ``_close``) closes it."""
    try:
        yield
    finally:
        await clients.aclose()
        loop = asyncio.get_running_loop()
        if _by_loop.get(loop) is clients:
            del _by_loop[loop]


async def _close(clients: LoopClients) -> None:
    closer, clients.closer = clients.closer, None
    if closer is not None:
        await closer.aclose()  # its finally closes the clients
    else:
        await clients.aclose()


def _drop_closed_loops() -> None:
    """Forget the entries of loops closed without ``shutdown_asyncgens()``."""
    for loop in [loop for loop in list(_by_loop.keys()) if loop.is_closed()]:
        _by_loop.pop(loop, None)


def is_async_cluster(client: object) -> bool:
    return isinstance(client, RedisCluster)


def _make() -> LoopClients:
    """The clients ``get_redis()`` would make, in redis.asyncio; nothing connects yet.
    InvalidOption for settings the sync client refuses, with the same words."""
    config = get_settings()
    url = str(config.redis_url)
    options = client_options(decode=True)
    pid, generation = os.getpid(), _generation
    if config.redis_cluster and not is_sentinel_url(url):
        check_cluster_url(url, options)
        options.pop("health_check_interval")  # (a cluster client takes none)
        first, *others = cluster_urls(url)
        more = [
            ClusterNode(u.hostname or "localhost", u.port or 6379) for u in map(urlsplit, others)
        ]
        cluster = RedisCluster.from_url(first, startup_nodes=more or None, **options)
        return LoopClients(cluster, True, generation, pid)
    # The sync client checks the URL and options and says what is wrong as delayqueue
    # says it; for these topologies it connects to nothing when made.
    get_redis()
    if is_sentinel_url(url):
        return _sentinel_clients(url, config.sentinel_master, config.sentinel_kwargs, options)
    try:
        client = AsyncRedis.from_url(url, **options)
    except (TypeError, ValueError) as exc:
        raise InvalidOption(f"REDIS_URL {redact_url(url)} is not usable: {exc}") from None
    return LoopClients(client, False, generation, pid, direct=_shared(client))


def _shared(client: Any) -> SharedConnection | None:
    return SharedConnection(client) if usable(client) else None


def _sentinel_clients(
    url: str, master: Any, sentinel_kwargs: Mapping[str, Any] | None, options: dict[str, Any]
) -> LoopClients:
    """``Sentinel.master_for``, as ``sentinel.sentinel_client`` makes it."""
    target = parse_sentinel_url(url)
    timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
    to_sentinels = {**timeouts, "retry": Retry(NoBackoff(), 0), **(sentinel_kwargs or {})}
    sentinel = Sentinel(target.sentinels, sentinel_kwargs=to_sentinels)
    client = sentinel.master_for(str(master), **{**options, **target.options})
    return LoopClients(client, False, _generation, os.getpid(), sentinel=sentinel)


async def aremember_queue(queue: str) -> None:
    """``clients.remember_queue`` on the loop's client."""
    if not queue_remembered(queue):
        clients = await loop_clients()
        with redis_errors():
            await clients.client.sadd(global_keys().queues, queue)
        queue_added(queue)


async def aclose_loop_clients() -> None:
    """Close the running loop's clients now (the loop's end does it otherwise)."""
    found = _by_loop.get(asyncio.get_running_loop())
    if found is not None and found.pid == os.getpid():
        await _close(found)
