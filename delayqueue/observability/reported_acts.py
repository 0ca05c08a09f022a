"""The operators' acts (the admin's and the command line's) as transitions that report
themselves, as ``reported`` does for the jobs' own: force a job back, purge dead jobs,
pause and resume a queue or a schedule. Each sends its signal, log line and counter
(docs/operations.md)."""

from __future__ import annotations

from collections.abc import Sequence

from delayqueue.engine import schedules, transitions
from delayqueue.engine.keys import QueueKeys
from delayqueue.engine.transitions import Id, ScriptCall
from delayqueue.observability import events
from delayqueue.observability.reported import id_text, reporting


def force_back(sender: str, keys: QueueKeys, job_id: str, reason: str) -> ScriptCall[bool]:
    """In flight -> scheduled, due now, whatever its token: ``job_forced_back``."""

    def report(moved: bool) -> None:
        if moved:
            events.forced_back(sender, keys.queue, job_id, reason)

    call = transitions.release(keys, job_id, delay_ms=0, give_back=False, reason=reason)
    return reporting(call, report)


def purge_ids(sender: str, keys: QueueKeys, ids: Sequence[Id]) -> ScriptCall[int]:
    """Dead jobs ``ids`` -> gone: ``dead_purged`` with the count deleted and the ids."""

    def report(deleted: int) -> None:
        events.dead_purged(sender, keys.queue, deleted, [id_text(i) for i in ids])

    return reporting(transitions.purge_ids(keys, ids), report)


def purge_oldest(sender: str, keys: QueueKeys, count: int) -> ScriptCall[int]:
    """The ``count`` oldest dead jobs -> gone: ``dead_purged`` with the count deleted."""

    def report(deleted: int) -> None:
        events.dead_purged(sender, keys.queue, deleted)

    return reporting(transitions.purge_oldest(keys, count), report)


def pause(sender: str, keys: QueueKeys, note: str) -> ScriptCall[bool]:
    """The queue's claims stop: ``queue_paused`` when it was not paused already."""

    def report(paused: bool) -> None:
        if paused:
            events.queue_paused(sender, keys.queue, note)

    return reporting(transitions.pause(keys, note), report)


def resume(sender: str, keys: QueueKeys) -> ScriptCall[bool]:
    """The queue's claims go on, its workers woken: ``queue_resumed`` when it was paused."""

    def report(resumed: bool) -> None:
        if resumed:
            events.queue_resumed(sender, keys.queue)

    return reporting(transitions.resume(keys), report)


def pause_schedule(sender: str, keys: QueueKeys, name: str) -> ScriptCall[bool]:
    """A schedule stops (its next occurrence's job goes): ``schedule_paused`` when it was
    running."""

    def report(paused: bool) -> None:
        if paused:
            events.schedule_paused(sender, keys.queue, name)

    return reporting(schedules.unplan(keys, name, "pause"), report)


def resume_schedule(
    sender: str, call: ScriptCall[schedules.Planned], queue: str, name: str, next_ms: int
) -> ScriptCall[schedules.Planned]:
    """``call``, which plans paused schedule ``name``'s occurrence at ``next_ms`` (the
    planner builds it): ``schedule_resumed`` once it planned it."""

    def report(done: schedules.Planned) -> None:
        if done.planned:
            events.schedule_resumed(sender, queue, name, next_ms)

    return reporting(call, report)
