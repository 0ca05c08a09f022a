"""The admin's actions as data: for each one its name, label, permission, the state its jobs
must be in, whether it asks first, and the one call of operations.py it makes; ``perform``
runs it and says what came of it (done, moved on meanwhile, cannot run) as messages that
name each job by its id, task and dedupe key. The views in pages.py check the permission and
the input first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpRequest
from django.utils.translation import ngettext

from delayqueue.engine.keys import State
from delayqueue.services import browse, operations

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
    """Run the action and add a message for each kind of outcome. The jobs' tasks and keys
    are read first, so that a message can name a job that the action removes."""
    labels = browse.job_labels(call.queue, call.ids) if action.state is not None else {}
    outcome = action.apply(call)
    request, queue = call.request, call.queue
    if isinstance(outcome, bool):
        if outcome:
            messages.success(request, f"Queue {queue} {action.done}.")
        else:
            messages.warning(request, f"Queue {queue} was already {action.done}; nothing changed.")
    elif isinstance(outcome, operations.BulkResult):
        done = ngettext(
            "%(count)d dead job of %(queue)s %(done)s.",
            "%(count)d dead jobs of %(queue)s %(done)s.",
            outcome.done,
        )
        messages.success(
            request, done % {"count": outcome.done, "queue": queue, "done": action.done}
        )
        if outcome.unrunnable:
            stay = ngettext(
                "%(count)d dead job stays dead: its task or arguments are missing in Redis, "
                "so it cannot run.",
                "%(count)d dead jobs stay dead: their task or arguments are missing in Redis, "
                "so they cannot run.",
                outcome.unrunnable,
            )
            messages.warning(request, stay % {"count": outcome.unrunnable})
    else:
        _report(request, action, outcome, labels)


SHOWN_IN_MESSAGE = 5  # most jobs a message names one by one


def _named(job_id: str, labels: dict[str, browse.JobLabel]) -> str:
    """``01J… (app.tasks.close_order, key “order:7”)``: the id with the task and the key."""
    label = labels.get(job_id)
    parts = []
    if label is not None and label.task:
        parts.append(label.task)
    if label is not None and label.key:
        parts.append(f"key “{label.key}”")
    return f"{job_id} ({', '.join(parts)})" if parts else job_id


def _listed(ids: list[str], labels: dict[str, browse.JobLabel]) -> str:
    shown = "; ".join(_named(i, labels) for i in ids[:SHOWN_IN_MESSAGE])
    rest = len(ids) - SHOWN_IN_MESSAGE
    return shown + (f"; and {rest} more" if rest > 0 else "")


def _count(ids: list[str]) -> str:
    return ngettext("%(count)d job", "%(count)d jobs", len(ids)) % {"count": len(ids)}


def _report(
    request: HttpRequest,
    action: Action,
    result: operations.ActionResult,
    labels: dict[str, browse.JobLabel],
) -> None:
    state = STATE_LABELS[action.state or "dead"]
    moved_on = (
        "moved on meanwhile (run, retried, cancelled or deleted by someone or something else)"
    )
    if len(result.done) == 1:
        messages.success(request, f"Job {_named(result.done[0], labels)} {action.done}.")
    elif result.done:
        messages.success(
            request, f"{_count(result.done)} {action.done}: {_listed(result.done, labels)}."
        )
    if len(result.missed) == 1:
        messages.warning(
            request,
            f"Job {_named(result.missed[0], labels)} is no longer {state} — {moved_on}; "
            "nothing was done.",
        )
    elif result.missed:
        messages.warning(
            request,
            f"{_count(result.missed)} are no longer {state} — {moved_on}; nothing was done to "
            f"them: {_listed(result.missed, labels)}.",
        )
    if len(result.unrunnable) == 1:
        messages.warning(
            request,
            f"Job {_named(result.unrunnable[0], labels)} stays dead — its task or arguments "
            "are missing in Redis, so it cannot run. Delete it instead.",
        )
    elif result.unrunnable:
        messages.warning(
            request,
            f"{_count(result.unrunnable)} stay dead — their task or arguments are missing in "
            f"Redis, so they cannot run. Delete them instead: "
            f"{_listed(result.unrunnable, labels)}.",
        )
