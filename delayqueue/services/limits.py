"""Deployment-wide limits for the admin's Limits page and ``manage.py delayqueue limits``:
each limited task's rate, concurrency and expiry as declared, and each of its limits' state
now (starts in the current window, jobs running, due jobs waiting for a slot), per queue or
shard (docs/limits.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from delayqueue.celery_app import get_celery_app
from delayqueue.conf import get_settings
from delayqueue.engine.limits import Limits, LimitState, limit_states
from delayqueue.engine.shards import shard_names


@dataclass(frozen=True)
class LimitedTask:
    task: str
    queue: str
    limits: Limits | None
    expires_ms: int | None
    states: list[LimitState] = field(default_factory=list)

    @property
    def expires_seconds(self) -> float | None:
        return None if self.expires_ms is None else self.expires_ms / 1000


def limited_tasks(notes: list[str] | None = None) -> list[LimitedTask]:
    """Every registered task with a rate, a concurrency or an expiry, with its limits' state."""
    notes = [] if notes is None else notes
    app = get_celery_app()
    app.loader.import_default_modules()
    found = []
    for name in sorted(app.tasks):
        task = app.tasks[name]
        limits = getattr(task, "dq_limits", None)
        expires_ms = getattr(task, "dq_expires_ms", None)
        if not (isinstance(limits, Limits) or isinstance(expires_ms, int)):
            continue
        queue = getattr(task, "dq_queue", None) or str(get_settings().default_queue)
        states: list[LimitState] = []
        if isinstance(limits, Limits) and limits:
            for shard in shard_names(queue):
                states += limit_states(shard, name, limits.window_ms, notes)
        found.append(
            LimitedTask(
                name, queue, limits if isinstance(limits, Limits) else None, expires_ms, states
            )
        )
    return found
