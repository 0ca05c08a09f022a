"""Periodic schedules for the admin's Schedules page and ``manage.py delayqueue schedules``:
what each one is (the rule as written and in words, its timezone, its next runs, its last
run and how that went) and the operator's acts on it (pause, resume, run now)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine import queues as queue_reads
from delayqueue.engine import schedules, transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import ScheduleField, new_job_id, queue_keys
from delayqueue.engine.reads import redis_now
from delayqueue.engine.registry import queue_names
from delayqueue.errors import DelayQueueError
from delayqueue.periodic import planner
from delayqueue.periodic.rules import upcoming

NEXT_RUNS = 5


@dataclass(frozen=True)
class ScheduleView:
    queue: str
    name: str
    task: str
    rule: str  # as written
    rule_in_words: str
    timezone: str
    paused: bool
    source: str
    next_runs: list[datetime] = field(default_factory=list)
    last_run: datetime | None = None
    last_job: str | None = None
    last_outcome: str | None = None  # "waiting", "running", "done", "dead"
    fired: int = 0
    missed: int = 0
    problem: str | None = None  # a record this build cannot read


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def all_schedules() -> list[ScheduleView]:
    """Every schedule of every known queue, by name."""
    found = []
    for queue in schedules.queues_with_schedules(queue_names().names):
        found += [_view(stored) for stored in schedules.stored(queue)]
    return sorted(found, key=lambda view: view.name)


def find(name: str) -> schedules.StoredSchedule | None:
    for queue in schedules.queues_with_schedules(queue_names().names):
        for stored in schedules.stored(queue, name):
            return stored
    return None


def _view(stored: schedules.StoredSchedule) -> ScheduleView:
    get = stored.fields.get
    base = ScheduleView(
        queue=stored.queue,
        name=stored.name,
        task=get(ScheduleField.TASK) or "?",
        rule=get(ScheduleField.RULE) or "?",
        rule_in_words="?",
        timezone=get(ScheduleField.TIMEZONE) or "?",
        paused=stored.paused,
        source=get(ScheduleField.SOURCE) or "?",
        fired=_int(get(ScheduleField.FIRED)),
        missed=_int(get(ScheduleField.MISSED_COUNT)),
    )
    try:
        rule = planner.rule_of(stored.fields)
    except (DelayQueueError, ValueError) as exc:
        return _replace(base, problem=f"its rule cannot be read: {exc}")
    runs = []
    if stored.next_ms is not None:
        runs = [stored.next_ms, *upcoming(rule, stored.next_ms, NEXT_RUNS - 1)]
    last_ms = _int(get(ScheduleField.LAST)) or None
    last_job = get(ScheduleField.LAST_JOB) or None
    return _replace(
        base,
        rule_in_words=rule.describe(),
        next_runs=[_at(ms) for ms in runs],
        last_run=_at(last_ms) if last_ms else None,
        last_job=last_job,
        last_outcome=_outcome(stored.queue, last_job) if last_job else None,
    )


def _replace(view: ScheduleView, **changes: Any) -> ScheduleView:
    return replace(view, **changes)


def _outcome(queue: str, job_id: str) -> str:
    """Where the last occurrence's job is: waiting (scheduled: a retry, or not yet claimed),
    running (in flight), dead, or done (acked and gone, or cancelled)."""
    states = queue_reads.states_of(queue, job_id.encode(), [])
    if states.get("dead") is not None:
        return "dead"
    if states.get("inflight") is not None:
        return "running"
    if states.get("scheduled") is not None:
        return "waiting"
    return "done"


def pause(name: str) -> bool:
    """Stop the schedule (its next occurrence's job goes); True when it was running."""
    stored = find(name)
    if stored is None:
        return False
    return run(schedules.unplan(queue_keys(stored.queue), name, "pause"))


def resume(name: str) -> bool:
    """Plan a paused schedule's next occurrence after now; True when it was paused."""
    stored = find(name)
    if stored is None or not stored.paused:
        return False
    rule = planner.rule_of(stored.fields)
    spec = stored.get(ScheduleField.SPEC) or ""
    fields = {k: v for k, v in stored.fields.items() if k not in _PLANNED_FIELDS}
    next_ms = rule.next_after(redis_now())
    run(planner.plan_call(stored.queue, name, next_ms, spec, fields))
    return True


_PLANNED_FIELDS = {
    ScheduleField.NEXT,
    ScheduleField.JOB,
    ScheduleField.SPEC,
    ScheduleField.NAME,
    ScheduleField.PAUSED,
}


def run_now(name: str) -> str | None:
    """One extra run of the schedule's task now (the schedule's own occurrences go on as
    planned); the new job's id, None when there is no such schedule."""
    stored = find(name)
    spec = stored.get(ScheduleField.SPEC) if stored is not None else None
    if stored is None or not spec:
        return None
    limits = stored.get(ScheduleField.LIMITS) or ""  # (its limits hold for it too)
    job = transitions.NewJob(new_job_id(), "delay", 0, "", "keep", spec, limits)
    keys = queue_keys(stored.queue)
    [done] = run(transitions.enqueue(keys, [job], wake_horizon_ms=WAKE_HORIZON_MS))
    return done.id
