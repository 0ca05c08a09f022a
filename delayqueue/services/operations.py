"""What an operator can do to jobs and queues from the admin. Each action runs the Lua script
of its transition (one per job, pipelined) and reports per job whether it applied or whether
the job had moved on in the meantime (run, cancelled, retried by someone else...), so the page
can say so instead of failing or pretending.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from delayqueue.conf import get_settings
from delayqueue.engine import queues
from delayqueue.engine.execution import run, run_all
from delayqueue.engine.keys import check_job_id, check_queue_name, queue_keys
from delayqueue.errors import InvalidDelay
from delayqueue.observability import reported, reported_acts
from delayqueue.signals import SENDER_ADMIN

RETRY_CHUNK = 500
PURGE_CHUNK = 1000


@dataclass
class ActionResult:
    """What one action did: ``done`` ids it applied to, ``missed`` ids that were no longer in
    the state the action needs, ``unrunnable`` dead ids whose data cannot run (kept in dead)."""

    action: str
    done: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    unrunnable: list[str] = field(default_factory=list)


@dataclass
class BulkResult:
    """What a queue-wide action did (counts; the ids can be many)."""

    action: str
    done: int = 0
    unrunnable: int = 0


def _ids(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(check_job_id(i) for i in ids))


def _sorted(action: str, ids: list[str], applied: list[bool]) -> ActionResult:
    result = ActionResult(action)
    for job_id, ok in zip(ids, applied, strict=True):
        (result.done if ok else result.missed).append(job_id)
    return result


# ---- scheduled jobs ---------------------------------------------------------------------


def reschedule(queue: str, ids: Sequence[str], delay_ms: int) -> ActionResult:
    """Scheduled jobs -> due ``delay_ms`` from now (Redis's clock)."""
    keys = queue_keys(check_queue_name(queue))
    ids = _ids(ids)
    max_ms = int(get_settings().max_delay) * 1000
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or not 0 <= delay_ms <= max_ms:
        raise InvalidDelay(f"a delay must be 0 to {max_ms} ms, not {delay_ms!r}")
    replies = run_all(
        [reported.reschedule(SENDER_ADMIN, keys, job_id=i, mode="delay", ms=delay_ms) for i in ids]
    )
    action = "run now" if delay_ms == 0 else "reschedule"
    return _sorted(action, ids, [reply.due_ms is not None for reply in replies])


def run_now(queue: str, ids: Sequence[str]) -> ActionResult:
    """Scheduled jobs -> due now (the worker dispatches them at once)."""
    return reschedule(queue, ids, 0)


def cancel(queue: str, ids: Sequence[str]) -> ActionResult:
    """Scheduled jobs -> gone."""
    keys = queue_keys(check_queue_name(queue))
    ids = _ids(ids)
    replies = run_all([reported.cancel(SENDER_ADMIN, keys, job_id=i) for i in ids])
    return _sorted("cancel", ids, [reply.removed for reply in replies])


# ---- in-flight jobs ---------------------------------------------------------------------


def force_back(queue: str, ids: Sequence[str], reason: str) -> ActionResult:
    """In-flight jobs -> scheduled, due now, whatever their fencing token ("" = any). The
    attempt counts. A dispatch still running keeps its token and may still ack the job."""
    keys = queue_keys(check_queue_name(queue))
    ids = _ids(ids)
    replies = run_all([reported_acts.force_back(SENDER_ADMIN, keys, i, reason[:500]) for i in ids])
    return _sorted("force back", ids, replies)


# ---- dead jobs --------------------------------------------------------------------------


def retry_dead(queue: str, ids: Sequence[str]) -> ActionResult:
    """Dead jobs -> scheduled, due now, with a fresh count of attempts."""
    keys = queue_keys(check_queue_name(queue))
    ids = _ids(ids)
    replies = run_all([reported.requeue(SENDER_ADMIN, keys, i) for i in ids])
    result = ActionResult("retry")
    for job_id, outcome in zip(ids, replies, strict=True):
        if outcome == "requeued":
            result.done.append(job_id)
        elif outcome == "cannot run":
            result.unrunnable.append(job_id)
        else:
            result.missed.append(job_id)
    return result


def delete_dead(queue: str, ids: Sequence[str]) -> ActionResult:
    """Dead jobs -> gone (their data too)."""
    keys = queue_keys(check_queue_name(queue))
    ids = _ids(ids)
    replies = run_all([reported_acts.purge_ids(SENDER_ADMIN, keys, [i]) for i in ids])
    return _sorted("delete", ids, [reply == 1 for reply in replies])


def retry_all_dead(queue: str, *, chunk: int = RETRY_CHUNK) -> BulkResult:
    """Every dead job of a queue -> scheduled, ``chunk`` per round trip. Jobs that die while
    this runs past the count taken at the start are left for the next call; jobs whose data
    cannot run stay in dead (and are counted)."""
    keys = queue_keys(check_queue_name(queue))
    result = BulkResult("retry all")
    budget = queues.count(queue, "dead", [])
    skip = 0  # dead jobs at the head that stay dead (unrunnable)
    while budget > 0:
        ids = queues.members(queue, "dead", skip, skip + min(chunk, budget) - 1)  # as stored
        if not ids:
            break
        replies = run_all([reported.requeue(SENDER_ADMIN, keys, i) for i in ids])
        budget -= len(ids)
        for outcome in replies:
            if outcome == "requeued":
                result.done += 1
            elif outcome == "cannot run":
                result.unrunnable += 1
                skip += 1
    return result


def purge_all_dead(queue: str, *, chunk: int = PURGE_CHUNK) -> BulkResult:
    """Every dead job of a queue -> gone, oldest first, ``chunk`` per script call (so Redis
    is never blocked by one huge call). Jobs that die while this runs, past the count taken
    at the start, are kept."""
    keys = queue_keys(check_queue_name(queue))
    result = BulkResult("purge all")
    budget = queues.count(queue, "dead", [])
    while budget > 0:
        deleted = run(reported_acts.purge_oldest(SENDER_ADMIN, keys, min(chunk, budget)))
        if not deleted:
            break
        result.done += deleted
        budget -= deleted
    return result


# ---- queues -----------------------------------------------------------------------------


def is_paused(queue: str) -> bool:
    return queues.is_paused(check_queue_name(queue))


def pause(queue: str, note: str) -> bool:
    """Stop workers claiming from the queue (jobs already in flight finish). False when it
    was paused already."""
    keys = queue_keys(check_queue_name(queue))
    # A note from a command line may hold bytes that are not UTF-8 (as lone surrogates):
    # kept, escaped, rather than refused by the Redis client's encoder.
    text = note[:200].encode("utf-8", "backslashreplace").decode() or "paused"
    return run(reported_acts.pause(SENDER_ADMIN, keys, text))


def resume(queue: str) -> bool:
    """Let workers claim from the queue again, and wake them so due jobs go at once. False
    when it was not paused."""
    return run(reported_acts.resume(SENDER_ADMIN, queue_keys(check_queue_name(queue))))
