"""The direct connections of the sync API on a Redis Cluster: one ``DirectConnections``
(``engine/direct.py``) per master, the master of a call found from its first key's hash
tag once, and redis-py's ``RedisCluster`` kept as the source of the slot map and as the
way through anything else (``execution.run_direct``; only calls safe to resend).

Every key of a queue carries the hash tag ``{queue}`` (``engine/keys.py``), so a call's
slot is its first key's and a queue's calls all go to one master: the call's first key is
looked up in a dict of routes (a queue's keys are the same strings on every call), else
its hash tag in another (a job's own key, new on every call, is not remembered), and the
call is written to that master's connection, as on a single server. redis-py's cluster
path (the command's policy and keys parsed, the slot and node looked up, its pool, its
reply callbacks) costs more client CPU than the round trip itself (docs/topologies.md,
"Redis Cluster").

A call the master did not take, or whose connection failed, goes the way it went before
this path existed: through ``RedisCluster``, which follows MOVED and ASK, waits out
TRYAGAIN, and learns the slot map again after CLUSTERDOWN or a connection error (a
failover). Only calls safe to send twice come here (``ScriptCall.resend_safe``): one that
timed out or lost its connection may have run, and runs again. The routes are forgotten
then and found again, on redis-py's map as it now stands, by the next call.
"""

from __future__ import annotations

import threading
from typing import Any

import redis
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    ClusterError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

from delayqueue.engine.clients import OnFirstUse
from delayqueue.engine.direct import DirectConnections

# What sends a call back through RedisCluster: MOVED and ASK (AskError: MovedError is one),
# TRYAGAIN, CLUSTERDOWN and MASTERDOWN (ClusterError), READONLY (a master demoted), a
# connection that failed twice or timed out, and a slot the map does not cover
# (RedisClusterException). Each leaves a call safe to resend; any other error is the
# call's own answer (a script's error, NOPERM, OOM) and is raised.
_REROUTE = (
    AskError,
    TryAgainError,
    ClusterError,
    ReadOnlyError,
    redis.ConnectionError,
    redis.TimeoutError,
    RedisClusterException,
)
ROUTES = 10_000  # distinct hash tags remembered at most (queues, shards): then all forgotten
TRIES = 2  # attempts on a master's connection (an idle one Redis dropped: once more)


def _tag(key: Any) -> Any:
    """What decides ``key``'s slot: the text between its first ``{`` and the next ``}``
    when not empty, else the whole key (Redis Cluster's rule; a key without a tag and a
    key tagged with it share a slot)."""
    if type(key) is str:
        start = key.find("{")
        if start >= 0:
            end = key.find("}", start + 1)
            if end > start + 1:
                return key[start + 1 : end]
    return key


class ClusterConnections:
    """A ``DirectConnections`` per master of ``client`` (redis-py's ``RedisCluster``), made
    from the connection class and options redis-py gave that master's own client (TLS,
    username and password, timeouts); and the routes: hash tag -> its master's
    connections."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._routes: dict[Any, DirectConnections] = {}  # hash tag -> its master's
        # the first key of the call that found a tag's route -> the same
        self._by_key: dict[Any, DirectConnections] = {}
        self._masters: dict[str, DirectConnections] = {}  # node name (host:port) -> its own
        self._lock = threading.Lock()

    def run(self, script: Script, keys: list[Any], args: list[Any]) -> Any:
        """EVALSHA ``script`` on the master of ``keys[0]``'s slot (loading it there when it
        lacks it); through ``RedisCluster`` when that master did not take it."""
        if not keys:
            return script(keys=keys, args=args, client=self._client)
        key = keys[0]
        master = self._by_key.get(key)
        try:
            if master is None:
                master = self._routes.get(_tag(key)) or self._route(key)
            return master.run(script, keys, args, tries=TRIES)
        except redis.AuthenticationError:
            raise  # (a ConnectionError, but no other path would pass it)
        except _REROUTE:
            pass
        try:
            return script(keys=keys, args=args, client=self._client)
        finally:  # the routes are found again on redis-py's map as that call left it
            self._forget_routes()

    def _route(self, key: Any) -> DirectConnections:
        """The connections of the master that serves ``key``'s slot in redis-py's map
        (SlotNotCoveredError when it has none: CLUSTERDOWN, mid-failover), remembered by
        the key's hash tag and by the key itself: the first call on a queue is most often
        one of its own keys (the schedule's, for delay_for), not a job's."""
        master = self._master(
            self._client.nodes_manager.get_node_from_slot(self._client.keyslot(key))
        )
        if len(self._routes) >= ROUTES:
            self._routes.clear()
            self._by_key.clear()
        self._routes[_tag(key)] = master
        self._by_key[key] = master
        return master

    def _master(self, node: Any) -> DirectConnections:
        """The connections of ``node`` (a ``ClusterNode``), made on first use."""
        master = self._masters.get(node.name)
        if master is None:
            with self._lock:
                master = self._masters.get(node.name)
                if master is None:
                    master = DirectConnections(self._client.get_redis_connection(node))
                    self._masters[node.name] = master
        return master

    def _forget_routes(self) -> None:
        """Forget every route (the slot map changed, or a master failed), and close the
        connections to nodes that no longer serve slots as masters in redis-py's map."""
        self._routes.clear()
        self._by_key.clear()
        try:
            serving = {node.name for node in self._client.get_primaries()}
        except (redis.RedisError, RedisClusterException):
            serving = set()
        with self._lock:
            gone = [self._masters.pop(name) for name in list(self._masters) if name not in serving]
        for master in gone:
            master.close()

    def routed(self, key: Any) -> str | None:
        """The master (``host:port``) a call whose first key is ``key`` now goes straight
        to; None while no call has found it (or since the routes were forgotten)."""
        master = self._by_key.get(key) or self._routes.get(_tag(key))
        return next((name for name, m in self._masters.items() if m is master), None)

    def open(self) -> None:
        """Connect one idle connection to every master ahead of the first call."""
        for node in self._client.get_primaries():
            self._master(node).open()

    def close(self) -> None:
        self._routes.clear()
        self._by_key.clear()
        with self._lock:
            masters, self._masters = self._masters, {}
        for master in masters.values():
            master.close()


# This process's connections to the masters, made on first use, closed when the settings
# change.
connections = OnFirstUse(ClusterConnections)
