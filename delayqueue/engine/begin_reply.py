"""begin.lua's reply, read (the Celery side's start: engine/transitions.begin)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Begun:
    run: bool  # False: a stale dispatch (or data that cannot run): do not run the task
    attempt: int = 0
    max_attempts: str = ""  # "" when the job stores none
    now_us: int | None = None  # Redis's clock as the script ran, in microseconds
    expired: bool = False  # not run: it expired before it started (bury it as "expired")
    rated: bool = False  # it has a rate, counted at this begin (begin it again to start later)
    limited_until: int | None = None  # not run: over its rate now, scheduled again for this ms
    # a job with a rate: the ms (Redis's clock) its start is counted at, the latest it may
    # start without being begun again (later than now when a batch was granted a horizon)
    counted_ms: int | None = None


def parse_begun(reply: Any) -> Begun:
    if int(reply[0]) == 3:
        return Begun(False, limited_until=int(reply[1]))
    if int(reply[0]) != 1:
        return Begun(False, expired=int(reply[0]) == 2)
    rated = int(reply[4]) == 1
    counted = int(reply[5]) if rated and len(reply) > 5 else None
    return Begun(True, int(reply[1]), _text(reply[2]), int(reply[3]), False, rated, None, counted)


def _text(value: Any) -> str:
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else str(value)
