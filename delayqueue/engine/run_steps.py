"""The steps running script calls takes, the same blocking (``execution``) or awaited
(``async_execution``): whether a call waits for replicas, what a durable write whose
replicas fell short is, how replies are read, which calls Redis refused for a lost script,
and how a cluster's masters' answers to durable calls are gathered. Each runner does only
its own I/O between them."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from redis.exceptions import AskError, NoPermissionError, NoScriptError

from delayqueue.conf import get_settings
from delayqueue.engine.redis_errors import translate
from delayqueue.engine.transitions import ScriptCall
from delayqueue.errors import DelayQueueError, NotDurable

logger = logging.getLogger("delayqueue")

CLUSTER_TRIES = 3  # a durable call MOVED by a stale slot map is sent this many times at most


class Wait(NamedTuple):
    """``WAIT replicas timeout_ms`` after a durable call."""

    replicas: int
    timeout_ms: int


def durability(durable: bool | None = None) -> Wait | None:
    """The WAIT a call makes: ``durable`` when given, else the ``DURABLE`` setting's."""
    config = get_settings()
    if not (config.durable if durable is None else durable):
        return None
    return Wait(int(config.durable_replicas), round(float(config.durable_timeout) * 1000))


def not_durable(writes: int, acked: int, wait: Wait) -> NotDurable:
    """What a durable write whose replicas did not all acknowledge it in time raises (or
    logs)."""
    noun = "1 write" if writes == 1 else f"{writes} writes"
    return NotDurable(
        f"{noun} reached the master but {acked} of {wait.replicas} replicas acknowledged "
        f"them within {wait.timeout_ms} ms (WAIT): they are written, and a failover before a "
        "replica copies them could lose them (DURABLE needs replicas: Sentinel, Cluster or a "
        "managed Redis with replicas)"
    )


def check_acked(writes: int, acked: int, wait: Wait | None, strict: bool) -> None:
    """After a round trip: replicas short of a durable write's WAIT are NotDurable when
    ``strict`` (a caller's write), else a warning in the log (the workers' own writes)."""
    if wait is not None and acked < wait.replicas:
        short = not_durable(writes, acked, wait)
        if strict:
            raise short
        logger.warning("%s", short)


def read_replies(calls: Sequence[ScriptCall[Any]], replies: Sequence[Any]) -> list[Any]:
    """Each call's reply read by its parser, or the DelayQueueError Redis's error is."""
    return [
        translate(reply) if isinstance(reply, Exception) else call.parse(reply)
        for call, reply in zip(calls, replies, strict=True)
    ]


def first_error(replies: list[Any]) -> list[Any]:
    """``replies``, or the first DelayQueueError among them raised (``run_all``)."""
    for reply in replies:
        if isinstance(reply, DelayQueueError):
            raise reply
    return replies


def only_reply(replies: list[Any]) -> Any:
    """The one reply of a one-call round trip, raised when it is an error."""
    (reply,) = replies
    if isinstance(reply, DelayQueueError):
        raise reply
    return reply


def lost_scripts(replies: Sequence[Any]) -> list[int]:
    """The indexes of the calls Redis refused for a script it lost (restart, SCRIPT FLUSH):
    only they are sent again (the others ran)."""
    return [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]


def by_master(
    client: Any, pending: list[int], first_key: Callable[[int], Any]
) -> dict[str, tuple[Any, list[int]]]:
    """The pending calls of a cluster, per master of their first key's slot."""
    groups: dict[str, tuple[Any, list[int]]] = {}
    for i in pending:
        node = client.get_node_from_key(first_key(i))
        groups.setdefault(node.name, (node, []))[1].append(i)
    return groups


def gather_master(
    indexes: list[int],
    answers: list[Any],
    node_acked: Any,
    replies: list[Any],
    moved: list[int],
    last_try: bool,
    acked: int,
) -> int:
    """One master's answers to its durable calls and its WAIT: the answers go into
    ``replies``, a call MOVED (AskError) into ``moved`` unless this is the ``last_try``.
    Returns the fewest replicas acknowledged so far; a WAIT the ACL refuses is raised."""
    for i, answer in zip(indexes, answers, strict=True):
        replies[i] = answer
        if isinstance(answer, AskError) and not last_try:
            moved.append(i)
    ran = len(indexes) > sum(isinstance(answer, AskError) for answer in answers)
    if isinstance(node_acked, Exception):
        if "NOPERM" in str(node_acked) or isinstance(node_acked, NoPermissionError):
            raise node_acked
        return 0 if ran else acked  # (a node that ran nothing, now a replica, waits for none)
    return min(acked, int(node_acked)) if ran else acked
