"""One typed function per Lua script: the only code that knows each script's KEYS and ARGV.

Each function takes a queue's keys and named arguments and returns a ``ScriptCall``: the
script's name, its KEYS and ARGV in the order the script's header gives, whether it is safe
to send twice, and how to read its reply into a named type. ``run``, ``run_many`` and
``run_direct`` (in ``delayqueue.engine.execution``) execute calls; nothing else writes a KEYS or
ARGV list or unpacks a reply by position (but ``carried.py``, which joins a begin, an ack or a
fail with a Django task's record call into one, as their scripts' headers say).

Safe to resend means: running the call twice with the same arguments leaves Redis as once
and gives the same reply. Only such calls go over the direct connection, which sends a
call again on a connection Redis dropped while it sat idle (``execution.run_direct``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from delayqueue.engine.begin_reply import Begun, parse_begun
from delayqueue.engine.keys import STATS_TTL_SECONDS, QueueKeys, current_minute
from delayqueue.engine.packing import enqueue_keys

ReplyT = TypeVar("ReplyT")
Id = str | bytes  # ids read back from Redis as bytes may be any bytes (corrupt data)


class ScriptCall(NamedTuple, Generic[ReplyT]):
    """One script call, ready to run (engine/execution.py). A tuple: made on every
    delay_for, in half the time of a frozen dataclass."""

    script: str  # the name of delayqueue/engine/lua/<script>.lua
    keys: list[Any]
    args: list[Any]
    parse: Callable[[Any], ReplyT]
    resend_safe: bool = False
    # its first send's args, which may skip a check a resend needs (engine/direct.py), or None
    first_args: list[Any] | None = None


def _text(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)


# ---- enqueue: (new) -> scheduled --------------------------------------------------------


class NewJob(NamedTuple):
    """One job for ``enqueue``: due ``ms`` from Redis's now ("delay") or at epoch ``ms``.
    Its fields are in the order of the script's ARGV for one job, so the tuple is appended
    as it is."""

    id: str
    mode: Literal["delay", "at"]
    ms: int
    key: str  # dedupe key, or ""
    on_conflict: str  # "keep" | "replace"
    packed: str  # the spec (delayqueue.engine.packing)
    limits: str = ""  # its limits and expiry (engine/limits.py), "" for none


class Enqueued(NamedTuple):  # a tuple: one per job of a batch, built fast
    id: str  # the new job's id, or the id of the job its key kept or replaced
    due_ms: int
    outcome: str  # "created" | "kept" | "replaced"
    state: str  # "scheduled" | "inflight" | "dead"


def enqueue(
    keys: QueueKeys, jobs: Sequence[NewJob], *, wake_horizon_ms: int
) -> ScriptCall[list[Enqueued]]:
    argv: list[Any] = [keys.wake, wake_horizon_ms]
    for job in jobs:
        argv += job  # id, mode, ms, key, on_conflict, packed, limits
    # resend-safe: the ids are the client's, so a second call finds its jobs written
    call_keys = enqueue_keys(keys, argv[7::7])
    return ScriptCall("enqueue", call_keys, argv, _enqueue_reply, resend_safe=True)


def _enqueue_reply(reply: Any) -> list[Enqueued]:
    return [
        Enqueued(_text(i), _int(due), _text(outcome), _text(state))
        for i, due, outcome, state in reply
    ]


def _int(value: Any) -> int:
    """A Lua number reply (an int) or a score as text."""
    return value if type(value) is int else int(float(value))


# ---- cancel, reschedule: scheduled -> gone | scheduled ------------------------------------


@dataclass(frozen=True)
class Cancelled:
    removed: bool
    id: str  # the job's id ("" when a key found none)


def cancel(keys: QueueKeys, *, job_id: str = "", key: str = "") -> ScriptCall[Cancelled]:
    return ScriptCall(
        "cancel",
        [keys.scheduled, keys.dedupe, keys.job_prefix, keys.spec_prefix],
        [job_id, key],
        lambda reply: Cancelled(int(reply[0]) == 1, _text(reply[1])),
    )


@dataclass(frozen=True)
class Rescheduled:
    id: str
    due_ms: int | None  # None: the job is not scheduled


def reschedule(
    keys: QueueKeys, *, job_id: str = "", key: str = "", mode: str, ms: int
) -> ScriptCall[Rescheduled]:
    def parse(reply: Any) -> Rescheduled:
        due = int(float(reply[1]))
        return Rescheduled(_text(reply[0]), due if due >= 0 else None)

    return ScriptCall(
        "reschedule", [keys.scheduled, keys.dedupe], [job_id, key, mode, ms, keys.wake], parse
    )


# ---- claim: scheduled -> inflight ---------------------------------------------------------


class ClaimedJob(NamedTuple):  # a tuple: one per claimed job, built fast
    """A claimed job as Redis holds it: bytes, decoded by the worker (which buries a job
    whose data is not UTF-8)."""

    id: bytes
    token: bytes | int
    attempt: bytes | int
    task: bytes
    args_json: bytes
    kwargs_json: bytes
    due_ms: int | None  # the score it was claimed at (its due time)
    trace: bytes = b""  # the trace context of its scheduling (docs/tracing.md), or b""


@dataclass(frozen=True)
class Claim:
    now_ms: int
    next_due_ms: int | None
    next_deadline_ms: int | None
    paused: bool
    jobs: list[ClaimedJob]
    expired: list[str] = field(default_factory=list)  # ids sent to dead as "expired"
    held: int = 0  # due jobs a rate or concurrency limit kept scheduled


def _claim_reply(reply: Any) -> Claim:
    now, next_due, next_deadline, paused, jobs, *limits = reply
    expired, held = limits or ([], 0)
    return Claim(
        int(now),
        int(next_due) if int(next_due) >= 0 else None,
        int(next_deadline) if int(next_deadline) >= 0 else None,
        bool(int(paused)),
        [_claimed_job(job) for job in jobs],
        [_text(job_id) for job_id in expired],
        int(held),
    )


def _claimed_job(row: Any) -> ClaimedJob:
    # (seven fields, or eight with a trace context, which most jobs lack: no list per row)
    job_id, token, attempt, task, args_json, kwargs_json, due = row if len(row) == 7 else row[:7]
    trace = _bytes(row[7]) if len(row) > 7 else b""
    try:
        due_ms: int | None = _int(due)
    except (ValueError, OverflowError):
        due_ms = None
    if not (type(job_id) is type(task) is type(args_json) is type(kwargs_json) is bytes):
        job_id, task = _bytes(job_id), _bytes(task)  # (bytes replies: no call per field)
        args_json, kwargs_json = _bytes(args_json), _bytes(kwargs_json)
    return ClaimedJob(job_id, token, attempt, task, args_json, kwargs_json, due_ms, trace)


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()


def claim(
    keys: QueueKeys, *, limit: int, visibility_ms: int, ahead_ms: int = 0
) -> ScriptCall[Claim]:
    return ScriptCall(
        "claim",
        [
            keys.scheduled,
            keys.inflight,
            keys.job_prefix,
            keys.paused,
            keys.stats(current_minute()),
            keys.dead,
            keys.spec_prefix,
            keys.limit_prefix,
            keys.dedupe,
            keys.tasks,
        ],
        [limit, visibility_ms, STATS_TTL_SECONDS, ahead_ms],
        _claim_reply,
    )


# ---- the Celery side: begin, ack, fail ---------------------------------------------------


def begin(
    keys: QueueKeys,
    job_id: str,
    token: str,
    *,
    visibility_ms: int,
    horizon_ms: int = 0,
    after: int = 0,
    parse: Callable[[Any], Begun] = parse_begun,
) -> ScriptCall[Begun]:
    """``horizon_ms`` and ``after``: a batch's (begin.lua, ARGV[5] and ARGV[6], left out
    when both are 0: the script's default). ``parse``: reads the reply (``parse_begun``, or
    a caller's that reports it too)."""
    args: list[Any] = [job_id, token, visibility_ms, keys.wake]
    if horizon_ms or after:
        args += (horizon_ms, after)
    return ScriptCall(
        "begin",
        [keys.job(job_id), keys.inflight, keys.limit_prefix, keys.scheduled],
        args,
        parse,
        resend_safe=True,  # a second begin restarts the same deadline
    )


def ack(keys: QueueKeys, job_id: str, token: str) -> ScriptCall[bool]:
    return ScriptCall(
        "ack",
        [
            keys.job(job_id),
            keys.inflight,
            keys.scheduled,
            keys.dedupe,
            keys.stats(current_minute()),
            keys.dead,
            keys.spec_prefix,
            keys.limit_prefix,
        ],
        [job_id, token, STATS_TTL_SECONDS, keys.wake],
        _acked,
        resend_safe=True,  # a second ack finds the job gone
    )


def _acked(reply: Any) -> bool:
    """(a function of its own, not a lambda made per call: a batch keeps its acks' calls
    until its end)"""
    return int(reply) == 1


FailOutcome = Literal["retry", "dead", "stale"]


def fail(
    keys: QueueKeys,
    job_id: str,
    token: str,
    *,
    backoff_ms: int,
    error: str,
    traceback: str,
    max_attempts: int,
    dead_max: int,
) -> ScriptCall[FailOutcome]:
    return ScriptCall(
        "fail",
        [
            keys.job(job_id),
            keys.inflight,
            keys.scheduled,
            keys.dead,
            keys.dedupe,
            keys.stats(current_minute()),
            keys.job_prefix,
            keys.spec_prefix,
            keys.limit_prefix,
        ],
        [
            job_id,
            token,
            backoff_ms,
            error,
            traceback,
            max_attempts,
            dead_max,
            STATS_TTL_SECONDS,
            keys.wake,
        ],
        _text,  # type: ignore[arg-type]
    )


# ---- the delay worker: reap, release, bury ------------------------------------------------


@dataclass(frozen=True)
class Reaped:
    rescheduled: int
    dead: int


def reap(keys: QueueKeys, *, limit: int, max_attempts: int) -> ScriptCall[Reaped]:
    return ScriptCall(
        "reap",
        [keys.inflight, keys.scheduled, keys.dead, keys.job_prefix, keys.dedupe, keys.limit_prefix],
        [limit, max_attempts, keys.wake],
        lambda reply: Reaped(int(reply[0]), int(reply[1])),
    )


def release(
    keys: QueueKeys,
    job_id: str,
    *,
    token: str = "",
    delay_ms: int,
    give_back: bool,
    reason: str,
    unless_begun: bool = False,
) -> ScriptCall[bool]:
    """In flight -> scheduled without a failure of the task (``token`` "" for any;
    ``unless_begun``: only while that dispatch has not begun)."""
    return ScriptCall(
        "release",
        [keys.job(job_id), keys.inflight, keys.scheduled, keys.limit_prefix],
        [job_id, token, delay_ms, int(give_back), reason, keys.wake, int(unless_begun)],
        lambda reply: int(reply) == 1,
    )


def _job_key(keys: QueueKeys, job_id: Id) -> Any:
    """The job's hash key; for an id read as bytes, bytes (the key Redis holds)."""
    return keys.job_prefix.encode() + job_id if isinstance(job_id, bytes) else keys.job(job_id)


def bury(keys: QueueKeys, job_id: Id, reason: str) -> ScriptCall[bool]:
    """Scheduled or in flight -> dead, for a job that can never run."""
    return ScriptCall(
        "bury",
        [
            _job_key(keys, job_id),
            keys.inflight,
            keys.scheduled,
            keys.dead,
            keys.dedupe,
            keys.stats(current_minute()),
            keys.spec_prefix,
            keys.limit_prefix,
            keys.tasks,
        ],
        [job_id, reason, STATS_TTL_SECONDS, keys.wake],
        lambda reply: int(reply) == 1,
    )


# ---- dead jobs: requeue, purge ------------------------------------------------------------

RequeueOutcome = Literal["requeued", "not dead", "cannot run"]
_REQUEUE: dict[int, RequeueOutcome] = {1: "requeued", 0: "not dead", -1: "cannot run"}


def requeue(keys: QueueKeys, job_id: Id, *, delay_ms: int = 0) -> ScriptCall[RequeueOutcome]:
    return ScriptCall(
        "requeue",
        [_job_key(keys, job_id), keys.dead, keys.scheduled, keys.dedupe],
        [job_id, delay_ms, keys.wake],
        lambda reply: _REQUEUE[int(reply)],
    )


def purge_ids(keys: QueueKeys, ids: Iterable[Id]) -> ScriptCall[int]:
    """Dead jobs -> gone; how many were deleted."""
    return ScriptCall("purge", [keys.dead, keys.job_prefix], ["ids", *ids], int)


def purge_oldest(keys: QueueKeys, count: int) -> ScriptCall[int]:
    return ScriptCall("purge", [keys.dead, keys.job_prefix], ["oldest", count], int)


# ---- pause / resume: a queue's flag that claim reads ------------------------------------


def pause(keys: QueueKeys, note: str) -> ScriptCall[bool]:
    """True when the queue is paused now, False when it was paused already."""
    return ScriptCall("pause", [keys.paused], [note], bool)


def resume(keys: QueueKeys) -> ScriptCall[bool]:
    """True when the queue was paused (its workers woken), False when it was not."""
    return ScriptCall("resume", [keys.paused], [keys.wake], bool)
