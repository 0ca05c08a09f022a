"""The admin's actions as data: for each one its name, label, permission, the state its jobs
must be in, whether it asks first, and the one call of operations.py it makes; ``perform``
runs it and says what came of it (done, moved on meanwhile, cannot run) as messages. The
views in pages.py check the permission and the input first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpRequest

from delayqueue.api import operations
from delayqueue.api.display import State

STATE_LABELS: dict[State, str] = {"scheduled": "scheduled", "inflight": "in flight", "dead": "dead"}


@dataclass(frozen=True)
class Call:
    """One use of an action: by whom, on which queue and jobs, with which delay (reschedule)."""

    request: HttpRequest
    queue: str
    ids: list[str]
    delay_ms: int = 0

    @property
    def who(self) -> str:
        return str(self.request.user.get_username())


# What an action's operation returns: per job, for a whole queue's dead jobs, or whether a
# queue's pause flag changed.
Outcome = operations.ActionResult | operations.BulkResult | bool


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    perm: str
    state: State | None  # the state its jobs must be in; None for a queue action
    done: str  # "{n} jobs <done>"
    apply: Callable[[Call], Outcome]
    confirm: bool = False  # asks "are you sure?" first
    danger: bool = False  # destroys jobs: a red button
    needs_delay: bool = False  # takes a delay (the reschedule form)
    from_dashboard: bool = False  # used on the dashboard, so it leads back there


# ---- what each action does: one call of operations.py -----------------------------------


def _run_now(c: Call) -> Outcome:
    return operations.run_now(c.queue, c.ids)


def _reschedule(c: Call) -> Outcome:
    return operations.reschedule(c.queue, c.ids, c.delay_ms)


def _cancel(c: Call) -> Outcome:
    return operations.cancel(c.queue, c.ids)


def _force_back(c: Call) -> Outcome:
    return operations.force_back(
        c.queue, c.ids, f"forced back to scheduled by {c.who} in the admin"
    )


def _retry(c: Call) -> Outcome:
    return operations.retry_dead(c.queue, c.ids)


def _delete(c: Call) -> Outcome:
    return operations.delete_dead(c.queue, c.ids)


def _retry_all(c: Call) -> Outcome:
    return operations.retry_all_dead(c.queue)


def _purge_all(c: Call) -> Outcome:
    return operations.purge_all_dead(c.queue)


def _pause(c: Call) -> Outcome:
    return operations.pause(c.queue, f"paused by {c.who} in the admin")


def _resume(c: Call) -> Outcome:
    return operations.resume(c.queue)


CHANGE, DELETE = "change_jobs", "delete_jobs"
ASK = {"confirm": True}
ASK_DANGER = {"confirm": True, "danger": True}

ACTIONS = {
    a.name: a
    for a in [
        Action("run_now", "Run now", CHANGE, "scheduled", "will run now", _run_now),
        Action(
            "reschedule",
            "Reschedule",
            CHANGE,
            "scheduled",
            "rescheduled",
            _reschedule,
            needs_delay=True,
        ),
        Action("cancel", "Cancel", CHANGE, "scheduled", "cancelled", _cancel, **ASK_DANGER),
        Action(
            "force_back",
            "Force back to scheduled",
            CHANGE,
            "inflight",
            "forced back to scheduled, due now",
            _force_back,
            **ASK,
        ),
        Action("retry", "Retry now", CHANGE, "dead", "requeued to run now", _retry),
        Action("delete", "Delete", DELETE, "dead", "deleted", _delete, **ASK_DANGER),
        Action("retry_all", "Retry all dead jobs", CHANGE, None, "requeued", _retry_all, **ASK),
        Action(
            "purge_all", "Delete all dead jobs", DELETE, None, "deleted", _purge_all, **ASK_DANGER
        ),
        Action("pause", "Pause", CHANGE, None, "paused", _pause, from_dashboard=True),
        Action("resume", "Resume", CHANGE, None, "resumed", _resume, from_dashboard=True),
    ]
}


def perform(action: Action, call: Call) -> None:
    """Run the action and add a message for each kind of outcome."""
    outcome = action.apply(call)
    request, queue = call.request, call.queue
    if isinstance(outcome, bool):
        if outcome:
            messages.success(request, f"Queue {queue} {action.done}.")
        else:
            messages.warning(request, f"Queue {queue} was already {action.done}; nothing changed.")
    elif isinstance(outcome, operations.BulkResult):
        messages.success(request, f"{outcome.done} dead jobs of {queue} {action.done}.")
        if outcome.unrunnable:
            messages.warning(
                request,
                f"{outcome.unrunnable} dead jobs stay dead: their task or arguments are "
                "missing in Redis, so they cannot run.",
            )
    else:
        _report(request, action, outcome)


def _jobs(ids: list[str]) -> str:
    if len(ids) == 1:
        return f"Job {ids[0]}"
    shown = ", ".join(ids[:5]) + (" …" if len(ids) > 5 else "")
    return f"{len(ids)} jobs ({shown})"


def _report(request: HttpRequest, action: Action, result: operations.ActionResult) -> None:
    state = STATE_LABELS[action.state or "dead"]
    if result.done:
        messages.success(request, f"{_jobs(result.done)} {action.done}.")
    if result.missed:
        messages.warning(
            request,
            f"{_jobs(result.missed)}: no longer {state} — moved on meanwhile (run, retried, "
            "cancelled or deleted by someone or something else); nothing was done.",
        )
    if result.unrunnable:
        messages.warning(
            request,
            f"{_jobs(result.unrunnable)}: stays dead — its task or arguments are missing in "
            "Redis, so it cannot run. Delete it instead.",
        )
