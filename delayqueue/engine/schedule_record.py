"""A periodic schedule as stored: its hash ``schedule:<name>`` (``keys.ScheduleField``) and
its score in the queue's ``schedules`` zset, read once into a ``ScheduleRecord``; and what a
declaration writes into it (``ScheduleDeclaration``). The only place the schedule's fields
are spelled outside the Lua scripts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delayqueue.engine.decode import text_fields
from delayqueue.engine.keys import JOB_ID, ScheduleField
from delayqueue.validators import shown

# Instants a schedule's next occurrence and last run may hold: what an occurrence id holds.
INSTANT_LIMIT_MS = 1 << 48


def instant(text: str | None) -> int | None:
    """A schedule's instant field (its last run) as epoch ms; None when it is none, or not
    an instant an occurrence can have (``INSTANT_LIMIT_MS``)."""
    if not text or not (text.isascii() and text.isdigit() and len(text) <= 15):
        return None
    value = int(text)
    return value if value < INSTANT_LIMIT_MS else None


def is_instant(ms: int | None) -> bool:
    return ms is not None and 0 <= ms < INSTANT_LIMIT_MS


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
    limits: str = ""  # the occurrences' limits, as the enqueue script reads them ("": none)

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
            ScheduleField.LIMITS: self.limits,
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
    limits: str | None = None  # its occurrences' limits (run now's too)
    job: str | None = None  # the job id of its next occurrence
    last: str | None = None  # ms of the last occurrence that was run, as stored
    last_job: str | None = None  # its job id
    fired: int = 0  # occurrences run (0 when that is not a number)
    missed_count: int = 0  # occurrences not run (0 when that is not a number)
    paused: bool = False

    @property
    def last_ms(self) -> int | None:
        """Its last run, None when there is none or it is no instant (a problem)."""
        return instant(self.last)

    @property
    def last_job_id(self) -> str | None:
        """Its last run's job, None when there is none or it is no job id (a problem)."""
        return self.last_job if self.last_job and JOB_ID.fullmatch(self.last_job) else None

    def problems(self) -> list[str]:
        """What of its record cannot be read: its next occurrence (unless it is paused),
        its last job, its last run. Its rule is the planner's to judge."""
        found = []
        if not self.paused and not is_instant(self.next_ms):
            found.append("its next occurrence is not an instant")
        if self.last_job and self.last_job_id is None:
            found.append(f"its last job {shown(self.last_job)} is not a job id")
        if self.last and self.last_ms is None:
            found.append(f"its last run {shown(self.last)} is not an instant")
        return found


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
        limits=get(ScheduleField.LIMITS),
        job=get(ScheduleField.JOB),
        last=get(ScheduleField.LAST),
        last_job=get(ScheduleField.LAST_JOB),
        fired=_count(get(ScheduleField.FIRED)),
        missed_count=_count(get(ScheduleField.MISSED_COUNT)),
        paused=get(ScheduleField.PAUSED) == "1",
    )
