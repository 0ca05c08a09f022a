"""enqueue.lua's plain layout: a batch of plain jobs (no dedupe key, no limits or expiry:
what ``delay_many`` writes) in 3 strings per job instead of 7, all due in one mode, and a
reply of one number (Redis's clock) instead of 4 values per job when every job was written
as new, which is what a batch almost always is.

A call sent again after some of its jobs were claimed (a dropped connection), or one that
meets a key of the wrong type, takes the script's general path and gets each job's reply,
as ``transitions.enqueue`` does (``PlainWritten.replies``)."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import chain
from typing import Any, Literal, NamedTuple

from delayqueue.engine.keys import QueueKeys
from delayqueue.engine.packing import enqueue_keys
from delayqueue.engine.transitions import Enqueued, ScriptCall, _enqueue_reply

PLAIN: str = "plain"  # ARGV[3] of the plain layout (lua/enqueue.lua)
FIRST: str = "plain-first"  # ARGV[3] of its first send (``ScriptCall.first_args``)


class PlainWritten(NamedTuple):
    """What a plain call did: with ``now_ms`` (Redis's clock when it ran), every job was
    created and is scheduled, due at ``now_ms`` + its ms ("delay") or at its ms ("at");
    else ``replies`` holds each job's reply, in order."""

    now_ms: int | None
    replies: list[Enqueued] | None = None

    def due_ms(self, mode: Literal["delay", "at"], ms: int) -> int:
        """The due time of a job sent with ``mode`` and ``ms`` (with ``now_ms`` only)."""
        return ms + (self.now_ms or 0) if mode == "delay" else ms


def enqueue_plain(
    keys: QueueKeys,
    mode: Literal["delay", "at"],
    jobs: Iterable[tuple[str, int, str]],
    *,
    wake_horizon_ms: int,
) -> ScriptCall[PlainWritten]:
    """(new) -> scheduled for plain jobs ``(id, ms, packed spec)``, each due ``ms`` from
    Redis's now ("delay") or at epoch ``ms`` ("at")."""
    argv: list[Any] = [keys.wake, wake_horizon_ms, PLAIN, mode, *chain.from_iterable(jobs)]
    # its first send: the ids were just made, no job of it can have a hash to look for
    first = argv.copy()
    first[2] = FIRST
    # resend-safe: the ids are the client's, so a second call finds its jobs written
    return ScriptCall("enqueue", enqueue_keys(keys, argv[6::3]), argv, _plain_reply, True, first)


def _plain_reply(reply: Any) -> PlainWritten:
    if len(reply) == 1 and type(reply[0]) is int:
        return PlainWritten(reply[0])
    return PlainWritten(None, _enqueue_reply(reply))
