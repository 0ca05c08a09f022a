"""``manage.py delayqueue schedules [list | pause NAME | resume NAME | run-now NAME]``: the
periodic schedules as lines or JSON, and the operator's acts on one of them."""

from __future__ import annotations

from typing import Any

from delayqueue.errors import CorruptSchedule
from delayqueue.services import schedules
from delayqueue.services.schedules import ScheduleView


def as_json(view: ScheduleView) -> dict[str, Any]:
    return {
        "name": view.name,
        "queue": view.queue,
        "task": view.task,
        "rule": view.rule,
        "rule_in_words": view.rule_in_words,
        "timezone": view.timezone,
        "paused": view.paused,
        "source": view.source,
        "next_runs": [moment.isoformat() for moment in view.next_runs],
        "last_run": view.last_run.isoformat() if view.last_run else None,
        "last_job": view.last_job,
        "last_outcome": view.last_outcome,
        "ran": view.fired,
        "missed": view.missed,
        "problem": view.problem,
    }


def lines(views: list[ScheduleView]) -> list[str]:
    if not views:
        return ["no periodic schedules"]
    out = []
    for view in views:
        state = "paused" if view.paused else "active"
        out.append(f"{view.name} ({state}): {view.task} on {view.queue}")
        out.append(f"  rule: {view.rule} ({view.rule_in_words}), timezone {view.timezone}")
        if view.next_runs:
            out.append("  next: " + ", ".join(m.isoformat() for m in view.next_runs))
        if view.last_run:
            out.append(
                f"  last: {view.last_run.isoformat()} job {view.last_job} ({view.last_outcome})"
            )
        out.append(f"  ran {view.fired}, missed {view.missed}")
        if view.problem:
            out.append(f"  problem: {view.problem}")
    return out


def act(action: str, name: str) -> tuple[bool, str]:
    """(done, what to say) for pause / resume / run-now of schedule ``name``."""
    if schedules.find(name) is None:
        return False, f"there is no schedule named {name!r}"
    try:
        return _act(action, name)
    except CorruptSchedule as exc:
        return False, str(exc)


def _act(action: str, name: str) -> tuple[bool, str]:
    if action == "pause":
        done = schedules.pause(name)
        return done, f"schedule {name} paused" if done else f"schedule {name} was paused already"
    if action == "resume":
        done = schedules.resume(name)
        return done, f"schedule {name} resumed" if done else f"schedule {name} was not paused"
    job_id = schedules.run_now(name)
    if job_id is None:
        return False, f"schedule {name}: no job to run (its task and arguments are not stored)"
    return True, f"schedule {name}: job {job_id} runs now"
