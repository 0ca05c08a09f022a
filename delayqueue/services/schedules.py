"""Periodic schedules for the admin's Schedules page and ``manage.py delayqueue schedules``:
what each one is (the rule as written and in words, its timezone, its next runs, its last
run and how that went) and the operator's acts on it (pause, resume, run now)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine import queues as queue_reads
from delayqueue.engine import schedules, transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import JOB_ID, ScheduleField, new_job_id, queue_keys
from delayqueue.engine.reads import redis_now
from delayqueue.engine.registry import queue_names
from delayqueue.engine.transitions import ScriptCall
from delayqueue.errors import CorruptSchedule, RedisError, RedisUnavailable
from delayqueue.periodic import planner
from delayqueue.periodic.planner import RECORD_ERRORS
from delayqueue.periodic.rules import EPOCH, upcoming
from delayqueue.validators import shown

NEXT_RUNS = 5
T = TypeVar("T")


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
    """The instant ``ms``; OverflowError outside the years 1 to 9999."""
    return EPOCH + timedelta(milliseconds=ms)


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
    """What the page and the command line show of ``stored``: a record that cannot be read
    in full (a rule that is no rule, an instant past the year 9999, a last job that is no
    job id) shows what can be read, and its ``problem``."""
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
    problems = []
    next_ms = stored.next_ms
    if not stored.paused and (next_ms is None or not 0 <= next_ms < planner.INSTANT_LIMIT_MS):
        problems.append("its next occurrence is not an instant")
    last_job = get(ScheduleField.LAST_JOB) or None
    if last_job is not None and not JOB_ID.fullmatch(last_job):
        problems.append(f"its last job {shown(last_job)} is not a job id")
        last_job = None
    last_ms = planner.instant(get(ScheduleField.LAST))
    if get(ScheduleField.LAST) and last_ms is None:
        problems.append(f"its last run {shown(get(ScheduleField.LAST))} is not an instant")
    try:
        last_run = _at(last_ms) if last_ms else None
        rule = planner.rule_of(stored.fields)
        in_words = rule.describe()
        runs = []
        if stored.next_ms is not None:
            runs = [stored.next_ms, *upcoming(rule, stored.next_ms, NEXT_RUNS - 1)]
        next_runs = [_at(ms) for ms in runs]
    except RedisUnavailable:
        raise
    except RECORD_ERRORS as exc:
        problems.insert(0, f"its rule or next run cannot be read: {exc}")
        return _replace(base, problem="; ".join(problems))
    return _replace(
        base,
        rule_in_words=in_words,
        next_runs=next_runs,
        last_run=last_run,
        last_job=last_job,
        last_outcome=_outcome(stored.queue, last_job) if last_job else None,
        problem="; ".join(problems) or None,
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


def _with_record(name: str, act: str) -> schedules.StoredSchedule | None:
    """The schedule ``name``; CorruptSchedule when it has no record (none, or a key of
    another type), which no act can work on."""
    stored = find(name)
    if stored is not None and not stored.fields:
        raise CorruptSchedule(
            f"schedule {name} cannot be {act}: its record is missing or is no hash"
        )
    return stored


def _on_record(call: ScriptCall[T], name: str, act: str) -> T:
    """Run ``call`` on schedule ``name``'s record: a script that refuses the record (a key
    of another type, a spec no build wrote) is CorruptSchedule; Redis refusing every write
    (OOM, READONLY ..., its subclasses) is raised as it is."""
    try:
        return run(call)
    except RedisError as exc:
        if type(exc) is not RedisError:
            raise
        raise CorruptSchedule(f"schedule {name} cannot be {act}: {exc}") from None


def pause(name: str) -> bool:
    """Stop the schedule (its next occurrence's job goes); True when it was running."""
    stored = _with_record(name, "paused")
    if stored is None:
        return False
    return _on_record(schedules.unplan(queue_keys(stored.queue), name, "pause"), name, "paused")


def resume(name: str) -> bool:
    """Plan a paused schedule's next occurrence after now; True when it was paused.
    CorruptSchedule when its record cannot be planned (its rule is no rule): it stays
    paused."""
    stored = _with_record(name, "resumed")
    if stored is None or not stored.paused:
        return False
    spec = stored.get(ScheduleField.SPEC) or ""
    fields = {k: v for k, v in stored.fields.items() if k not in _PLANNED_FIELDS}
    try:
        next_ms = planner.rule_of(stored.fields).next_after(redis_now())
        call = planner.plan_call(stored.queue, name, next_ms, spec, fields)
    except RedisUnavailable:
        raise
    except RECORD_ERRORS as exc:
        raise CorruptSchedule(f"schedule {name} cannot be resumed: {exc}") from None
    _on_record(call, name, "resumed")
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
    stored = _with_record(name, "run now")
    spec = stored.get(ScheduleField.SPEC) if stored is not None else None
    if stored is None or not spec:
        return None
    limits = stored.get(ScheduleField.LIMITS) or ""  # (its limits hold for it too)
    job = transitions.NewJob(new_job_id(), "delay", 0, "", "keep", spec, limits)
    keys = queue_keys(stored.queue)
    call = transitions.enqueue(keys, [job], wake_horizon_ms=WAKE_HORIZON_MS)
    [done] = _on_record(call, name, "run now")
    return done.id
