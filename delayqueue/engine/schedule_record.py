"""A periodic schedule as stored: its hash ``schedule:<name>`` (``keys.ScheduleField``) and
its score in the queue's ``schedules`` zset, read once into a ``ScheduleRecord``; and what a
declaration writes into it (``ScheduleDeclaration``). The only place the schedule's fields
are spelled outside the Lua scripts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delayqueue.engine.decode import text_fields
from delayqueue.engine.keys import ScheduleField


@dataclass(frozen=True)
class ScheduleDeclaration:
    """What a declared schedule writes into its record when it is planned."""

    task: str  # the Celery task each occurrence runs
    rule: str  # as written: "0 6 * * *", "every 60 s"
    cron: str  # the cron line, "" for an every= rule
    every_ms: str  # the period, "" for a cron rule
    timezone: str
    fingerprint: str  # changes when the rule, its timezone or the spec change
    missed: str  # "once" | "all" | "skip"
    source: str  # "code" | "settings"

    def fields(self) -> dict[str, str]:
        return {
            ScheduleField.TASK: self.task,
            ScheduleField.RULE: self.rule,
            ScheduleField.CRON: self.cron,
            ScheduleField.EVERY_MS: self.every_ms,
            ScheduleField.TIMEZONE: self.timezone,
            ScheduleField.FINGERPRINT: self.fingerprint,
            ScheduleField.MISSED: self.missed,
            ScheduleField.SOURCE: self.source,
        }


@dataclass(frozen=True)
class ScheduleRecord:
    """One schedule as stored. A field that is absent is None, text that is not UTF-8 has
    its bytes escaped; what the text means (a rule, an instant, a job id) is for the planner
    to judge, which says so as the schedule's problem. A record that is missing or no hash
    has ``found`` False and every field None."""

    queue: str
    name: str
    next_ms: int | None  # its score: None while paused, or when it is no time
    found: bool = False
    task: str | None = None
    rule: str | None = None  # as written
    cron: str | None = None
    every_ms: str | None = None  # the period in ms, as stored
    timezone: str | None = None
    fingerprint: str | None = None
    missed: str | None = None  # the policy for missed occurrences
    source: str | None = None
    spec: str | None = None  # the packed spec of every occurrence
    job: str | None = None  # the job id of its next occurrence
    last: str | None = None  # ms of the last occurrence that was run, as stored
    last_job: str | None = None  # its job id
    fired: int = 0  # occurrences run (0 when that is not a number)
    missed_count: int = 0  # occurrences not run (0 when that is not a number)
    paused: bool = False


def _count(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


def schedule_record(queue: str, name: str, next_ms: int | None, stored: Any) -> ScheduleRecord:
    """The record of the hash ``stored`` as read (anything that is no hash reads as empty)."""
    fields = text_fields(stored)
    get = fields.get
    return ScheduleRecord(
        queue=queue,
        name=name,
        next_ms=next_ms,
        found=bool(fields),
        task=get(ScheduleField.TASK),
        rule=get(ScheduleField.RULE),
        cron=get(ScheduleField.CRON),
        every_ms=get(ScheduleField.EVERY_MS),
        timezone=get(ScheduleField.TIMEZONE),
        fingerprint=get(ScheduleField.FINGERPRINT),
        missed=get(ScheduleField.MISSED),
        source=get(ScheduleField.SOURCE),
        spec=get(ScheduleField.SPEC),
        job=get(ScheduleField.JOB),
        last=get(ScheduleField.LAST),
        last_job=get(ScheduleField.LAST_JOB),
        fired=_count(get(ScheduleField.FIRED)),
        missed_count=_count(get(ScheduleField.MISSED_COUNT)),
        paused=get(ScheduleField.PAUSED) == "1",
    )
