"""A Django task's record, carried by its job's begin, ack or fail: ``task_started.lua``
and ``task_finished.lua`` (engine/task_results.py) write a Django task's results hash; a
job's begin carries the start, and its ack or fail the outcome (their optional trailing
KEYS and ARGV, their Lua headers): one script call per transition, the job's hash read
once. ``begin_starting`` and ``settling_with`` build that one call from the two
(transitions.py's and task_results.py's); the runner's riders send it (runner/riders.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from redis.exceptions import ResponseError

from delayqueue.engine.begin_reply import Begun
from delayqueue.engine.decode import text
from delayqueue.engine.redis_errors import translate
from delayqueue.engine.transitions import ScriptCall
from delayqueue.errors import DelayQueueError

ReplyT = TypeVar("ReplyT")

# A carried call's reply that is text is the error it met (a tuple: ``bytes | str`` would
# be made at each check)
_TEXT = (bytes, str)


CARRIED_START = "task_started"  # the script whose call a begin can carry
CARRIED_OUTCOME = "task_finished"  # the script whose call an ack or fail can carry
_BEGIN_ARGS = 6  # begin.lua's ARGV before a start's (ARGV[5] and ARGV[6] given: "0" for none)
_NO_HORIZON = [0, 0]  # ARGV[5] and ARGV[6] of a begin that gives neither (never changed)


def begin_starting(
    begin: ScriptCall[Begun], start: ScriptCall[ReplyT]
) -> ScriptCall[tuple[Begun, ReplyT | DelayQueueError]] | None:
    """``begin`` (``transitions.begin``'s) carrying ``start``, a ``task_started`` call for the same
    job (engine/task_results.py), whose start it writes when the dispatch runs; its reply
    is the begin's and the start's (None, as task_started.lua's {}, when it does not run;
    the DelayQueueError it met, which does not keep the job from running). None for a call
    it cannot carry (sent after the begin, in its round trip: runner/riders.py)."""
    if begin.script != "begin" or start.script != CARRIED_START or len(start.keys) != 2:
        return None
    args = begin.args
    if len(args) < _BEGIN_ARGS:
        args = args + _NO_HORIZON
    return ScriptCall(
        "begin",
        begin.keys + start.keys[:1],  # (new lists: neither call changes)
        args + start.args,
        partial(_begun_and_started, begin.parse, start.parse),
        begin.resend_safe and start.resend_safe,
    )


def _begun_and_started(
    parse: Callable[[Any], Begun], parse_start: Callable[[Any], ReplyT], reply: Any
) -> tuple[Begun, ReplyT | DelayQueueError]:
    began = parse(reply)
    if len(reply) < 7:  # (it does not run: nothing written)
        return began, parse_start([])
    started = reply[6]
    if isinstance(started, _TEXT):  # (the text of the error it met)
        return began, translate(ResponseError(text(started)))
    return began, parse_start(started)


def settling_with(
    settle: ScriptCall[ReplyT], outcome: ScriptCall[Any]
) -> ScriptCall[tuple[ReplyT, Any]] | None:
    """``settle`` (``transitions.ack``'s or ``fail``'s) carrying ``outcome``, a
    ``task_finished`` call (engine/task_results.py), which it writes first whatever the ack
    or fail finds; its reply is the settling's and the outcome's (the DelayQueueError it
    met: the job is settled all the same). None for a call it cannot carry."""
    if outcome.script != CARRIED_OUTCOME or len(outcome.keys) != 1:
        return None
    if (settle.script, len(settle.keys), len(settle.args)) not in _SETTLES:
        return None
    return ScriptCall(
        settle.script,
        settle.keys + outcome.keys,  # (new lists: neither call changes)
        settle.args + outcome.args,
        partial(_settled_and_recorded, settle.parse, outcome.parse),
        settle.resend_safe and outcome.resend_safe,
    )


_SETTLES = {("ack", 8, 4), ("fail", 9, 9)}  # each with every KEYS and ARGV of its own given


def _settled_and_recorded(
    parse: Callable[[Any], ReplyT], parse_outcome: Callable[[Any], Any], reply: Any
) -> tuple[ReplyT, Any]:
    settled, recorded = reply
    if isinstance(recorded, _TEXT):  # (the text of the error it met)
        return parse(settled), translate(ResponseError(text(recorded)))
    return parse(settled), parse_outcome(recorded)
