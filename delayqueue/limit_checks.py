"""System check of limits given in settings (docs/limits.md): delayqueue.E030, a
``TASKS`` entry of delayqueue's backend whose ``OPTIONS`` give a bad ``RATE``,
``CONCURRENCY`` or ``EXPIRES``. Registered by the app's ready()."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from delayqueue.errors import InvalidOption
from delayqueue.producer.task_options import checked_limits

BACKEND = "delayqueue.tasks_backend.DelayQueueBackend"
NAMES = {"RATE": "rate", "CONCURRENCY": "concurrency", "EXPIRES": "expires"}


@register("delayqueue")
def check_limit_options(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return []
    problems: list[CheckMessage] = []
    for alias, entry in tasks.items():
        if not isinstance(entry, dict) or entry.get("BACKEND") != BACKEND:
            continue
        options = entry.get("OPTIONS")
        if not isinstance(options, dict):
            continue
        given = {NAMES[name]: options.get(name) for name in NAMES}
        try:
            checked_limits(**given, where=f"TASKS[{alias!r}]['OPTIONS']")
        except InvalidOption as exc:
            problems.append(
                Error(
                    str(exc),
                    hint='RATE is "N/s", "N/m" or "N/h"; CONCURRENCY an int from 1; EXPIRES '
                    "seconds above 0 (docs/limits.md).",
                    id="delayqueue.E030",
                )
            )
    return problems
