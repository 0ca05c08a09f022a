"""Running the calls ``transitions`` builds on the running loop's redis.asyncio client
(``engine/async_clients.py``): the same ``ScriptCall`` objects, scripts, errors and
durability as ``engine/execution.py``, with the round trip awaited instead of blocking.

One call is the script's ``AsyncScript`` (EVALSHA; SCRIPT LOAD and again on NOSCRIPT). Many
calls go in one pipeline; only those Redis refused for a missing script are sent again. A
durable call is followed by ``WAIT`` in the same round trip on the same connection (on a
cluster, one per master the calls went to)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from redis.asyncio.cluster import PipelineCommand

from delayqueue.engine.async_clients import LoopClients, loop_clients
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
    only_reply,
    read_replies,
)
from delayqueue.engine.transitions import ReplyT, ScriptCall


async def arun(
    call: ScriptCall[ReplyT], *, durable: bool | None = None, strict: bool = True
) -> ReplyT:
    """``execution.run`` on the running loop: one script call and its read reply."""
    if durability(durable) is not None:
        return cast(ReplyT, only_reply(await arun_many([call], durable=True, strict=strict)))
    clients = await loop_clients()
    script = clients.script(call.script)
    with redis_errors():
        reply = await script(keys=call.keys, args=call.args)
    return call.parse(reply)


async def arun_direct(
    call: ScriptCall[ReplyT], *, durable: bool | None = None, strict: bool = True
) -> ReplyT:
    """``execution.run_direct`` on the running loop: a call safe to resend, on the loop's
    shared connection (``engine/async_direct.py``) where it has one; else ``arun``."""
    if not call.resend_safe:  # (inline: the path of every delay_for)
        raise ValueError(f"the {call.script} script is not safe to send twice")
    clients = await loop_clients()
    if clients.direct is None or durability(durable) is not None:
        return await arun(call, durable=durable, strict=strict)
    script = clients.script(call.script)
    with redis_errors():
        reply = await clients.direct.call(script.sha, script.script, call.keys, call.args)
    return call.parse(reply)


async def arun_many(
    calls: Sequence[ScriptCall[Any]], *, durable: bool | None = None, strict: bool = False
) -> list[Any]:
    """``execution.run_many`` on the running loop: each item is the call's read reply, or
    the DelayQueueError its script raised."""
    if not calls:
        return []
    clients = await loop_clients()
    wait = durability(durable)
    with redis_errors():
        replies, acked = await _pipelined(clients, calls, wait)
    check_acked(len(calls), acked, wait, strict)
    return read_replies(calls, replies)


async def arun_all(
    calls: Sequence[ScriptCall[Any]], *, durable: bool | None = None, strict: bool = True
) -> list[Any]:
    """``arun_many``, raising the first error instead of returning it."""
    return first_error(await arun_many(calls, durable=durable, strict=strict))


async def _pipelined(
    clients: LoopClients, calls: Sequence[ScriptCall[Any]], wait: Wait | None
) -> tuple[list[Any], int]:
    """``execution.run_pipelined``: the calls in one round trip, a lost script loaded and
    only the calls it refused sent again."""
    replies, acked = await _execute(clients, list(calls), wait)
    missing = lost_scripts(replies)
    if missing:
        for name in {calls[i].script for i in missing}:
            await clients.client.script_load(clients.script(name).script)
        again, acked_again = await _execute(clients, [calls[i] for i in missing], wait)
        acked = min(acked, acked_again)
        for i, reply in zip(missing, again, strict=True):
            replies[i] = reply
    return replies, acked


async def _execute(
    clients: LoopClients, calls: list[ScriptCall[Any]], wait: Wait | None
) -> tuple[list[Any], int]:
    if wait is not None and clients.cluster:
        return await _execute_durable_on_cluster(clients, calls, wait)
    pipe = clients.client.pipeline(transaction=False)
    for call in calls:
        sha = clients.script(call.script).sha
        pipe.execute_command("EVALSHA", sha, len(call.keys), *call.keys, *call.args)
    if wait is None:
        return list(await pipe.execute(raise_on_error=False)), 0
    pipe.execute_command("WAIT", wait.replicas, wait.timeout_ms)
    *replies, acked = await pipe.execute(raise_on_error=False)
    if isinstance(acked, Exception):  # NOPERM (the ACL lacks +wait), not "no replica"
        raise acked
    return replies, int(acked)


async def _execute_durable_on_cluster(
    clients: LoopClients, calls: list[ScriptCall[Any]], wait: Wait
) -> tuple[list[Any], int]:
    """``execution._execute_durable_on_cluster``: each master's calls and their WAIT on one
    of that master's connections; a call MOVED by a stale slot map did not run, and is sent
    to the master that holds its slot now (the map learned again), with a WAIT of its own."""
    client = clients.client
    replies: list[Any] = [None] * len(calls)
    acked = wait.replicas
    pending = list(range(len(calls)))
    for attempt in range(CLUSTER_TRIES):
        moved: list[int] = []
        for node, indexes in by_master(client, pending, lambda i: calls[i].keys[0]).values():
            commands = [
                PipelineCommand(
                    n,
                    "EVALSHA",
                    clients.script(calls[i].script).sha,
                    len(calls[i].keys),
                    *calls[i].keys,
                    *calls[i].args,
                )
                for n, i in enumerate(indexes)
            ]
            commands.append(PipelineCommand(len(indexes), "WAIT", wait.replicas, wait.timeout_ms))
            await node.execute_pipeline(commands)
            *answers, node_acked = [command.result for command in commands]
            last_try = attempt == CLUSTER_TRIES - 1
            acked = gather_master(indexes, answers, node_acked, replies, moved, last_try, acked)
        if not moved:
            break
        await client.nodes_manager.initialize()
        pending = moved
    return replies, acked
