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
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.engine.packing import with_trace
from delayqueue.engine.reads import redis_now
from delayqueue.engine.roster import queue_names
from delayqueue.engine.schedule_record import ScheduleRecord
from delayqueue.engine.transitions import ScriptCall
from delayqueue.errors import CorruptSchedule, RedisError, RedisUnavailable
from delayqueue.integrations import otel
from delayqueue.observability import reported, reported_acts
from delayqueue.periodic import planner
from delayqueue.periodic.planner import RECORD_ERRORS
from delayqueue.periodic.rules import EPOCH, upcoming
from delayqueue.signals import SENDER_ADMIN

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


def all_schedules() -> list[ScheduleView]:
    """Every schedule of every known queue, by name."""
    found = []
    for queue in schedules.queues_with_schedules(queue_names().names):
        found += [_view(stored) for stored in schedules.stored(queue)]
    return sorted(found, key=lambda view: view.name)


def find(name: str) -> ScheduleRecord | None:
    for queue in schedules.queues_with_schedules(queue_names().names):
        for stored in schedules.stored(queue, name):
            return stored
    return None


def _view(stored: ScheduleRecord) -> ScheduleView:
    """What the page and the command line show of ``stored``: a record that cannot be read
    in full (a rule that is no rule, an instant past the year 9999, a last job that is no
    job id) shows what can be read, and its ``problem``."""
    base = ScheduleView(
        queue=stored.queue,
        name=stored.name,
        task=stored.task or "?",
        rule=stored.rule or "?",
        rule_in_words="?",
        timezone=stored.timezone or "?",
        paused=stored.paused,
        source=stored.source or "?",
        fired=stored.fired,
        missed=stored.missed_count,
    )
    problems = stored.problems()
    last_job, last_ms = stored.last_job_id, stored.last_ms
    try:
        last_run = _at(last_ms) if last_ms else None
        rule = planner.rule_of(stored)
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


def _with_record(name: str, act: str) -> ScheduleRecord | None:
    """The schedule ``name``; CorruptSchedule when it has no record (none, or a key of
    another type), which no act can work on."""
    stored = find(name)
    if stored is not None and not stored.found:
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
    call = reported_acts.pause_schedule(SENDER_ADMIN, queue_keys(stored.queue), name)
    return _on_record(call, name, "paused")


def resume(name: str) -> bool:
    """Plan a paused schedule's next occurrence after now; True when it was paused.
    CorruptSchedule when its record cannot be planned (its rule is no rule): it stays
    paused."""
    stored = _with_record(name, "resumed")
    if stored is None or not stored.paused:
        return False
    spec = stored.spec or ""
    try:
        next_ms = planner.rule_of(stored).next_after(redis_now())
        # (the record keeps its rule, its counts and its last run: only the plan is new)
        planned = planner.plan_call(stored.queue, name, next_ms, spec, None, stored.job)
        call = reported_acts.resume_schedule(SENDER_ADMIN, planned, stored.queue, name, next_ms)
    except RedisUnavailable:
        raise
    except RECORD_ERRORS as exc:
        raise CorruptSchedule(f"schedule {name} cannot be resumed: {exc}") from None
    return _on_record(call, name, "resumed").planned  # (False: resumed meanwhile)


def run_now(name: str) -> str | None:
    """One extra run of the schedule's task now (the schedule's own occurrences go on as
    planned); the new job's id, None when there is no such schedule."""
    stored = _with_record(name, "run now")
    spec = stored.spec if stored is not None else None
    if stored is None or not spec:
        return None
    limits = stored.limits or ""  # (its limits hold for it too)
    spec = with_trace(spec, otel.active_context())  # the admin request's trace, if any
    job = transitions.NewJob(new_job_id(), "delay", 0, "", "keep", spec, limits)
    keys = queue_keys(stored.queue)
    one_off = reported.Written(reported.OneOff(stored.task or ""))
    call = reported.enqueue(SENDER_ADMIN, keys, [job], [one_off], wake_horizon_ms=WAKE_HORIZON_MS)
    [done] = _on_record(call, name, "run now")
    return done.id


def act(action: str, name: str) -> tuple[bool, str]:
    """Pause, resume or run now ("pause", "resume", or "run_now" / "run-now") schedule
    ``name``, as the admin and the command line ask: (done, what to say, a sentence without
    its capital and full stop). A record that cannot be acted on raises CorruptSchedule."""
    if action == "pause":
        done = pause(name)
        return done, f"schedule {name} paused" if done else f"schedule {name} was paused already"
    if action == "resume":
        done = resume(name)
        return done, f"schedule {name} resumed" if done else f"schedule {name} was not paused"
    job_id = run_now(name)
    if job_id is None:
        return False, f"schedule {name}: no job to run (its task and arguments are not stored)"
    return True, f"schedule {name}: job {job_id} runs now"
