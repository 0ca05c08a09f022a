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

from collections.abc import Sequence
from typing import Any

from redis.commands.core import Script
from redis.exceptions import NoScriptError

from delayqueue.engine import direct
from delayqueue.engine.clients import get_redis, is_cluster, on_reset
from delayqueue.engine.execution import get_scripts, run_many
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.run_steps import durability, read_replies
from delayqueue.engine.transitions import ScriptCall

_loaded: set[str] = set()  # the SHAs this process has loaded on its Redis (SCRIPT LOAD)


@on_reset
def _forget() -> None:
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
        replies = _run(direct.connections(), [scripts[call.script] for call in calls], calls)
    return read_replies(calls, replies)


def _run(
    connections: direct.DirectConnections, scripts: list[Script], calls: Sequence[ScriptCall[Any]]
) -> list[Any]:
    commands = [
        direct.packed("EVALSHA", script.sha, len(call.keys), *call.keys, *call.args)
        for script, call in zip(scripts, calls, strict=True)
    ]
    new = {script.sha: script for script in scripts if script.sha not in _loaded}
    replies = connections.run_all(_loads(new.values()) + commands)
    loads, replies = replies[: len(new)], replies[len(new) :]
    _loaded.update(sha for sha, reply in zip(new, loads, strict=True) if reply == sha)
    missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
    if missing:  # Redis lost its scripts since: load them, send again what it refused
        lost = {scripts[i].sha: scripts[i] for i in missing}
        again = connections.run_all(_loads(lost.values()) + [commands[i] for i in missing])
        _loaded.update(sha for sha, reply in zip(lost, again, strict=False) if reply == sha)
        for i, reply in zip(missing, again[len(lost) :], strict=True):
            replies[i] = reply
    return replies


def _loads(scripts: Any) -> list[bytes]:
    return [direct.packed("SCRIPT", "LOAD", script.script) for script in scripts]


def warm_up() -> None:
    """Connect one now where ``run_many_direct`` uses them (a new Celery pool process): the
    first job's round trip does not pay for it."""
    if not is_cluster(get_redis()) and durability(None) is None:
        with redis_errors():
            direct.connections().open()
