"""Running the calls ``transitions`` builds: one at a time, many in one round trip, or on
the direct connections (``direct.py``, on a cluster ``cluster_direct.py``: only calls safe
to resend). Scripts are registered once per client and run by SHA; a script Redis lost
(restart, SCRIPT FLUSH) is loaded again.

A durable call (``durable=True``, or the ``DURABLE`` setting) is followed by ``WAIT`` in
the same round trip and on the same connection (on a cluster, one per node the calls went
to): it returns when ``DURABLE_REPLICAS`` replicas have everything the connection wrote."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, cast

import redis
from redis import Redis
from redis.commands.core import Script

from delayqueue.engine import cluster_direct, direct
from delayqueue.engine.clients import get_raw_redis, get_redis, is_cluster, on_reset
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.run_steps import (
    CLUSTER_TRIES,
    Wait,
    by_master,
    check_acked,
    durability,
    first_error,
    gather_master,
    lost_scripts,
    not_durable,
    only_reply,
    read_replies,
)
from delayqueue.engine.scripts import Scripts
from delayqueue.engine.transitions import ReplyT, ScriptCall

__all__ = ["Wait", "durability", "not_durable"]  # (the steps it shares: engine/run_steps.py)
_lock = threading.Lock()
_scripts: Scripts | None = None


def get_scripts() -> Scripts:
    global _scripts
    if _scripts is None:
        _scripts = Scripts(get_redis())
    return _scripts


@on_reset
def _forget() -> None:
    global _scripts
    with _lock:
        _scripts = None


def run(
    call: ScriptCall[ReplyT],
    client: Redis | None = None,
    *,
    durable: bool | None = None,
    strict: bool = True,
    as_bytes: bool = False,
) -> ReplyT:
    """Run one script call (EVALSHA, loading the script when Redis lost it) and read its
    reply; Redis's errors as delayqueue's (see ``translate``). Durable and ``strict`` (a
    caller's write): NotDurable when the replicas did not acknowledge it in time (it is
    written); not strict (the workers' own writes), a warning in the log. ``as_bytes``: on
    the client whose replies are bytes (ids read back as stored, UTF-8 or not)."""
    client = get_raw_redis() if as_bytes else client
    wait = durability(durable)
    if wait is not None:
        return cast(ReplyT, only_reply(run_many([call], client, durable=True, strict=strict)))
    script = get_scripts()[call.script]
    with redis_errors():
        reply = script(keys=call.keys, args=call.args, client=client or get_redis())
    return call.parse(reply)


def run_many(
    calls: Sequence[ScriptCall[Any]],
    client: Redis | None = None,
    *,
    durable: bool | None = None,
    strict: bool = False,
    as_bytes: bool = False,
) -> list[Any]:
    """Run many script calls in one round trip; each item of the result is the call's read
    reply, or the DelayQueueError its script raised (the other calls still ran).

    Durable, replicas that did not acknowledge in time are NotDurable when ``strict`` (a
    caller's write), else a warning in the log (the worker's own writes: the jobs it claimed
    must still be dispatched; a failover would only run them again). ``as_bytes``: as for
    ``run``."""
    if not calls:
        return []
    client = get_raw_redis() if as_bytes else client
    scripts = get_scripts()
    wait = durability(durable)
    with redis_errors():
        replies, acked = run_pipelined(
            [(scripts[c.script], c.keys, c.args) for c in calls], client, wait
        )
    check_acked(len(calls), acked, wait, strict)
    return read_replies(calls, replies)


def run_all(
    calls: Sequence[ScriptCall[Any]],
    client: Redis | None = None,
    *,
    durable: bool | None = None,
    strict: bool = True,
) -> list[Any]:
    """``run_many``, raising the first error instead of returning it (NotDurable too, when
    ``strict``)."""
    return first_error(run_many(calls, client, durable=durable, strict=strict))


Call = tuple[Script, list[str], list[Any]]


def run_pipelined(
    calls: list[Call], client: Redis | None = None, wait: Wait | None = None
) -> tuple[list[Any], int]:
    """Run many script calls in one round trip (EVALSHA), loading a script only when Redis
    has lost it (restart, SCRIPT FLUSH). Errors of single calls come back as exceptions.
    With ``wait``, WAIT follows in the same round trip; the second item is the fewest
    replicas that acknowledged (0 without a wait).

    Only the calls Redis refused for a missing script are sent again: the others already
    ran, and running them twice would lose their replies (a claim's jobs, say)."""
    client = client or get_redis()
    if len(calls) > 1:
        _load_first_use(client, calls)
    replies, acked = _execute(client, calls, wait)
    missing = lost_scripts(replies)
    if missing:
        for script in {calls[i][0].sha: calls[i][0] for i in missing}.values():
            client.script_load(script.script)
            _loaded.add((id(client), script.sha))
        again, acked_again = _execute(client, [calls[i] for i in missing], wait)
        acked = min(acked, acked_again)
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies, acked


# (client, script) pairs this process has loaded: a pipeline whose calls depend on their
# order (a Django task's outcome before its ack, runner/riders.py) must not have its first
# call refused for a script Redis never saw while the next one runs. So the first time a
# pipeline of several calls uses a script on a client, it is loaded first (one round trip,
# once per process). Redis losing its scripts later (a restart) refuses every call of such
# a pipeline alike, unless another process has loaded some of them again in between: that
# window, one round trip after a restart, this does not close.
_loaded: set[tuple[int, str]] = set()


def _load_first_use(client: Redis, calls: list[Call]) -> None:
    new = {c[0].sha: c[0] for c in calls if (id(client), c[0].sha) not in _loaded}
    if not new:
        return
    if is_cluster(client):  # (SCRIPT LOAD goes to every master; a cluster pipeline refuses it)
        for script in new.values():
            client.script_load(script.script)
    else:
        pipe = client.pipeline(transaction=False)
        for script in new.values():
            pipe.script_load(script.script)
        pipe.execute()
    _loaded.update((id(client), sha) for sha in new)


def _execute(client: Redis, calls: list[Call], wait: Wait | None) -> tuple[list[Any], int]:
    if wait is not None and is_cluster(client):
        return _execute_durable_on_cluster(client, calls, wait)
    pipe = client.pipeline(transaction=False)
    for script, keys, args in calls:
        # execute_command, not pipe.evalsha: redis-py's cluster pipeline refuses the method
        # (a script's keys may span slots, it says) yet routes the command by its keys. Each of
        # ours has its keys in one slot; the pipeline sends each node its own calls.
        pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
    if wait is None:
        return pipe.execute(raise_on_error=False), 0
    pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
    *replies, acked = pipe.execute(raise_on_error=False)
    if isinstance(acked, Exception):  # NOPERM (the ACL lacks +wait), not "no replica"
        raise acked
    return replies, int(acked)


def _execute_durable_on_cluster(
    client: Any, calls: list[Call], wait: Wait
) -> tuple[list[Any], int]:
    """Durable calls on a cluster: each master's calls and their WAIT in one pipeline of
    that master's own client, so on one connection. (The cluster pipeline would send a call
    a failover MOVED on another connection, which a WAIT of the first would not cover.) A
    call MOVED by a stale slot map did not run: the map is learned again and the call sent
    to the master that holds its slot now, with a WAIT of its own."""
    replies: list[Any] = [None] * len(calls)
    acked = wait.replicas
    pending = list(range(len(calls)))
    for attempt in range(CLUSTER_TRIES):
        moved: list[int] = []
        for node, indexes in by_master(client, pending, lambda i: calls[i][1][0]).values():
            pipe = client.get_redis_connection(node).pipeline(transaction=False)
            for i in indexes:
                script, keys, args = calls[i]
                pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args)
            pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
            try:
                *answers, node_acked = pipe.execute(raise_on_error=False)
            except redis.ConnectionError:
                client.nodes_manager.initialize()  # the next call finds the new master
                raise
            last_try = attempt == CLUSTER_TRIES - 1
            acked = gather_master(indexes, answers, node_acked, replies, moved, last_try, acked)
        if not moved:
            break
        client.nodes_manager.initialize()
        pending = moved
    return replies, acked


def run_direct(
    call: ScriptCall[ReplyT], *, durable: bool | None = None, strict: bool = True
) -> ReplyT:
    """One script call on a connection of ``DirectConnections`` (same server and settings
    as ``get_redis()``; on a cluster, the master of the call's slot:
    ``cluster_direct.py``): only for calls safe to resend (``ScriptCall.resend_safe``)."""
    if not call.resend_safe:  # (inline: the path of every delay_for)
        raise ValueError(f"the {call.script} script is not safe to send twice")
    if durability(durable) is not None:
        # A durable call's WAIT goes in the same round trip, on the same connection (``run``).
        return run(call, durable=durable, strict=strict)
    script: Script = getattr(get_scripts(), call.script)  # (Scripts[name], one call less)
    with redis_errors():
        if is_cluster(get_redis()):
            reply = cluster_direct.connections().run(script, call.keys, call.args)
        else:
            reply = direct.connections().run(script, call.keys, call.args, call.first_args)
    return call.parse(reply)


def run_all_direct(calls: Sequence[ScriptCall[Any]], *, durable: bool | None = None) -> list[Any]:
    """``run_all`` in one round trip on a connection of ``DirectConnections`` (each call's
    first send with its ``first_args``, as ``run_direct``) when every call is safe to resend,
    none waits for replicas and Redis is no cluster; else ``run_all``."""
    if (
        not calls
        or durability(durable) is not None
        or not all(call.resend_safe for call in calls)
        or is_cluster(get_redis())
    ):
        return run_all(calls, durable=durable)
    scripts = get_scripts()
    sent = [(scripts[c.script], c.keys, c.args, c.first_args) for c in calls]
    with redis_errors():
        replies = direct.connections().run_many(sent)
    return first_error(read_replies(calls, replies))


def warm_up() -> None:
    """Register the scripts and open a direct connection now (a new Celery pool process,
    a web worker): the first job's round trip does not pay for them."""
    get_scripts()
    with redis_errors():
        if is_cluster(get_redis()):
            cluster_direct.connections().open()  # one to each master
        else:
            direct.connections().open()
