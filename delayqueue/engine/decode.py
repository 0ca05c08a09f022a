"""Stored values as Python values, whatever Redis holds: the one place the records
(``record.StoredJob``, ``schedule_record.ScheduleRecord``, ``task_results.StoredTaskResult``,
``registry.WorkerRecord``) turn bytes into text and numbers. A value that is not what its field
should hold becomes None (or the record's ``problem``), never an exception."""

from __future__ import annotations

import math
from typing import Any

LARGEST_COUNT = 2**63  # Redis integers are 64-bit; anything larger was not written by us


def text(value: bytes | str) -> str:
    """A stored value as text: UTF-8, with any other byte as ``\\xNN``."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def text_fields(stored: Any) -> dict[str, str]:
    """A hash as read (bytes or text; anything that is no dict reads as empty) as text."""
    if not isinstance(stored, dict):
        return {}
    return {text(name): text(value) for name, value in stored.items()}


def integer(value: Any) -> int | None:
    """A stored counter, attempt or time as an int; None when it is not a finite number
    within Redis's 64-bit range."""
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if isinstance(value, str):
        if len(value) > 40:
            return None
        try:
            return _bounded(int(value))
        except ValueError:
            try:
                value = float(value)
            except ValueError:
                return None
    if isinstance(value, bool | int):
        return _bounded(int(value))
    if isinstance(value, float) and math.isfinite(value):
        return _bounded(int(value))
    return None


def _bounded(value: int) -> int | None:
    return value if -LARGEST_COUNT <= value <= LARGEST_COUNT else None
