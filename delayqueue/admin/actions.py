"""What each admin action is (name, label, permission, the state its jobs must be in, whether
it asks first) and how it runs: one call of operations.py, then a message per outcome (done,
moved on meanwhile, cannot run). The views in views.py check permissions and input first."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib import messages
from django.http import HttpRequest

from delayqueue.api import browse, operations

STATE_LABELS = {"scheduled": "scheduled", "inflight": "in flight", "dead": "dead"}


@dataclass(frozen=True)
class Action:
    name: str
    label: str
    perm: str
    state: browse.State | None  # the state its jobs must be in; None for a queue action
    confirm: bool
    done: str  # "{n} jobs <done>"


ACTIONS = {
    a.name: a
    for a in [
        Action("run_now", "Run now", "change_jobs", "scheduled", False, "will run now"),
        Action("reschedule", "Reschedule", "change_jobs", "scheduled", False, "rescheduled"),
        Action("cancel", "Cancel", "change_jobs", "scheduled", True, "cancelled"),
        Action(
            "force_back",
            "Force back to scheduled",
            "change_jobs",
            "inflight",
            True,
            "forced back to scheduled, due now",
        ),
        Action("retry", "Retry now", "change_jobs", "dead", False, "requeued to run now"),
        Action("delete", "Delete", "delete_jobs", "dead", True, "deleted"),
        Action("retry_all", "Retry all dead jobs", "change_jobs", None, True, "requeued"),
        Action("purge_all", "Delete all dead jobs", "delete_jobs", None, True, "deleted"),
        Action("pause", "Pause", "change_jobs", None, False, "paused"),
        Action("resume", "Resume", "change_jobs", None, False, "resumed"),
    ]
}


def perform(
    request: HttpRequest, queue: str, action: Action, ids: list[str], delay_ms: int
) -> None:
    name = action.name
    who = request.user.get_username()
    if name in ("pause", "resume"):
        if name == "pause":
            changed = operations.pause(queue, f"paused by {who} in the admin")
        else:
            changed = operations.resume(queue)
        if changed:
            messages.success(request, f"Queue {queue} {action.done}.")
        else:
            messages.warning(request, f"Queue {queue} was already {action.done}; nothing changed.")
        return
    if name in ("retry_all", "purge_all"):
        if name == "retry_all":
            bulk = operations.retry_all_dead(queue)
        else:
            bulk = operations.purge_all_dead(queue)
        messages.success(request, f"{bulk.done} dead jobs of {queue} {action.done}.")
        if bulk.unrunnable:
            messages.warning(
                request,
                f"{bulk.unrunnable} dead jobs stay dead: their task or arguments are missing "
                "in Redis, so they cannot run.",
            )
        return
    result = {
        "run_now": lambda: operations.run_now(queue, ids),
        "reschedule": lambda: operations.reschedule(queue, ids, delay_ms),
        "cancel": lambda: operations.cancel(queue, ids),
        "force_back": lambda: operations.force_back(
            queue, ids, f"forced back to scheduled by {who} in the admin"
        ),
        "retry": lambda: operations.retry_dead(queue, ids),
        "delete": lambda: operations.delete_dead(queue, ids),
    }[name]()
    _report(request, action, result)


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
