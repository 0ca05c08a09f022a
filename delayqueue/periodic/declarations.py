"""The schedules this process declares, in code (``@periodic_task``) and in settings
(``DELAYQUEUE["SCHEDULES"]``). Nothing here touches Redis or imports the producer API: a
declaration brings its own ``build`` (the queue and packed spec of its occurrences), which
``planner`` calls when a delay worker reconciles what Redis holds with what is declared."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from delayqueue.errors import InvalidOption
from delayqueue.validators import shown

Missed = Literal["once", "all", "skip"]
MISSED_POLICIES: tuple[Missed, ...] = ("once", "all", "skip")
Source = Literal["code", "settings"]
NAME_MAX_CHARS = 200


@dataclass(frozen=True)
class Declared:
    name: str
    task: str  # the Celery task each occurrence runs
    cron: str | None
    every_ms: int | None
    timezone: str
    missed: Missed
    source: Source
    # (queue, packed spec, limits) of the occurrences; raises a DelayQueueError when the
    # task, its arguments or its queue cannot be scheduled
    build: Callable[[], tuple[str, str, str]]
    monitor: bool = False  # report occurrences to a Sentry cron monitor (integrations/)


def check_monitor(value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidOption(f"monitor must be True or False, not {value!r}")
    return value


_in_code: dict[str, Declared] = {}
_loaders: list[Callable[[], list[Declared]]] = []


def check_name(name: object) -> str:
    """A schedule's name, as ``@periodic_task(name=...)`` and ``DELAYQUEUE["SCHEDULES"]``
    both take it: a str of 1 to NAME_MAX_CHARS printable characters (no line break, no
    control or format character, which a log line, a page or a terminal would show as
    something else); InvalidOption otherwise."""
    if not isinstance(name, str) or not 0 < len(name) <= NAME_MAX_CHARS or not name.isprintable():
        raise InvalidOption(
            f"a schedule's name is a str of 1 to {NAME_MAX_CHARS} printable characters on "
            f"one line, not {type(name).__name__} {shown(name)}"
        )
    return name


def check_missed(value: object) -> Missed:
    if value not in MISSED_POLICIES:
        raise InvalidOption(f"missed must be one of {MISSED_POLICIES}, not {value!r}")
    return value


def add(declared: Declared) -> None:
    """A schedule declared in code. Declaring the same name again for another task is an
    error at import; the same task again (a module imported twice) replaces it."""
    found = _in_code.get(declared.name)
    if found is not None and found.task != declared.task:
        raise InvalidOption(
            f"schedule name {declared.name!r} is used twice: for {found.task} and "
            f"{declared.task}; give one of them another name="
        )
    _in_code[declared.name] = declared


def add_loader(loader: Callable[[], list[Declared]]) -> None:
    """A source of declarations read each time they are asked for (the settings)."""
    if loader not in _loaders:
        _loaders.append(loader)


def declared() -> list[Declared]:
    """Every declared schedule: code first, then settings (a name used twice appears twice:
    the system check delayqueue.E020 reports it, and the planner plans the first)."""
    found = list(_in_code.values())
    for loader in _loaders:
        found += loader()
    return found


def duplicates(found: list[Declared]) -> list[str]:
    seen: set[str] = set()
    twice = []
    for item in found:
        if item.name in seen:
            twice.append(item.name)
        seen.add(item.name)
    return twice
