"""System checks of periodic schedules (DELAYQUEUE["SCHEDULES"] and @periodic_task):
delayqueue.E020 (an entry that is no schedule), E021 (a name declared twice), E022 (a
schedule that cannot be planned). Registered by the app's ready()."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from delayqueue.checks import _given


@register()
def check_schedules(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Periodic schedules (DELAYQUEUE["SCHEDULES"] and @periodic_task): each can be planned
    (a good cron line, a known timezone, a known task, JSON arguments, a valid queue), and
    no name is used twice."""
    if _checking_schedules:
        # Looking a task up may import the Celery app's task modules, and Celery's Django
        # fix-up runs the system checks when it does: this check, again, from inside itself.
        return []
    _checking_schedules.append(True)
    try:
        return _schedule_problems()
    finally:
        _checking_schedules.pop()


_checking_schedules: list[bool] = []


def _schedule_problems() -> list[CheckMessage]:
    from delayqueue.errors import DelayQueueError
    from delayqueue.periodic import declarations, declare  # noqa: F401 (declare: the settings)

    if _given() is None:
        return []  # E001 says DELAYQUEUE is no dict
    try:
        found = declarations.declared()
    except DelayQueueError as exc:
        return [
            Error(
                str(exc),
                hint="docs/periodic-jobs.md says what a schedule takes.",
                id="delayqueue.E020",
            )
        ]
    problems: list[CheckMessage] = [
        Error(
            f"Schedule name {name!r} is declared twice (in code and settings, or twice in "
            "code): only one of them would be planned.",
            hint="Give one of them another name= (or another key in SCHEDULES).",
            id="delayqueue.E021",
        )
        for name in sorted(set(declarations.duplicates(found)))
    ]
    for item in found:
        try:
            item.build()
        except DelayQueueError as exc:
            problems.append(
                Error(
                    f"Schedule {item.name!r} ({item.source}) cannot be planned: {exc}",
                    hint="Its task must be a registered Celery task, its args and kwargs "
                    "plain JSON, its queue a valid name.",
                    id="delayqueue.E022",
                )
            )
    return problems
