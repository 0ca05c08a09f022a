"""``manage.py delayqueue limits``: each limited task's rate, concurrency and expiry, and its
limits' state now, as lines or JSON."""

from __future__ import annotations

from typing import Any

from delayqueue.services.limits import LimitedTask


def as_json(task: LimitedTask) -> dict[str, Any]:
    limits = task.limits
    return {
        "task": task.task,
        "queue": task.queue,
        "rate": limits.rate_text if limits and limits.rate else None,
        "concurrency": limits.concurrency if limits and limits.concurrency else None,
        "expires_seconds": task.expires_seconds,
        "limits": [
            {
                "queue": state.queue,
                "limit_key": state.limit_key,
                "starts_in_window": state.starts,
                "running": state.running,
                "waiting": state.waiting,
            }
            for state in task.states
        ],
    }


def lines(tasks: list[LimitedTask]) -> list[str]:
    if not tasks:
        return ["no task has a rate, a concurrency or an expiry"]
    out = []
    for task in tasks:
        limits, said = task.limits, []
        if limits and limits.rate:
            said.append(f"rate {limits.rate_text}")
        if limits and limits.concurrency:
            said.append(f"concurrency {limits.concurrency}")
        if task.expires_seconds is not None:
            said.append(f"expires {task.expires_seconds:g} s")
        out.append(f"{task.task} on {task.queue}: {', '.join(said)}")
        if limits and not task.states:
            out.append("  idle (no starts in the window, none running, none waiting)")
        for state in task.states:
            key = f"key {state.limit_key!r}" if state.limit_key else "no key"
            out.append(
                f"  {key} on {state.queue}: {state.starts} started in the window, "
                f"{state.running} running, {state.waiting} waiting for a slot"
            )
    return out
