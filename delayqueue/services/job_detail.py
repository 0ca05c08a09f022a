"""Everything Redis holds about one job, for the admin's job page: read as bytes and shown
through display.py, so arguments that are not JSON (a planted pickle, say), text that is not
UTF-8, a history that is not a list of attempts or a key of the wrong type all render."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from delayqueue.engine import record
from delayqueue.engine.keys import STATES, JobField, State, queue_keys
from delayqueue.engine.packing import job_fields
from delayqueue.engine.reads import redis_now
from delayqueue.integrations.trace_context import trace_id
from delayqueue.services.display import DETAIL_CHARS, Moment, integer, text, ulid_ms

PRETTY_CHARS = 200_000  # arguments longer than this are shown as stored, not re-indented
HISTORY_SHOWN = 200


@dataclass
class Attempt:
    at: Moment | None
    attempt: int | None
    outcome: str
    detail: str


@dataclass
class JobDetail:
    queue: str
    id: str
    state: State | None  # None: the hash exists but the job is in no set (a moment's race)
    at: Moment | None
    now_ms: int
    task: str
    args: str  # pretty-printed JSON, or the raw text when it is not JSON
    kwargs: str
    args_valid: bool
    key: str
    attempts: int
    max_attempts: int | None
    visibility_ms: int | None
    created: Moment | None
    token: str
    error: str
    traceback: str
    reason: str
    history: list[Attempt]
    history_valid: bool
    missing: bool  # the id is in a set but its hash is gone
    notes: list[str] = field(default_factory=list)  # keys of the wrong type, shown as empty
    trace_id: str | None = None  # of the trace it was scheduled in (docs/tracing.md)


def _pretty(raw: str | None, empty: str) -> tuple[str, bool]:
    if raw is None or raw == "":
        return empty, True
    if len(raw) > PRETTY_CHARS:
        return text(raw, DETAIL_CHARS), True
    try:
        value = json.loads(raw)
        return text(json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)), True
    except (ValueError, RecursionError, TypeError):
        return text(raw, DETAIL_CHARS), False


def _history(raw: str | None, now: int) -> tuple[list[Attempt], bool]:
    if not raw:
        return [], True
    try:
        entries = json.loads(raw)
    except (ValueError, RecursionError):
        return [], False
    if not isinstance(entries, list):
        return [], False
    history = []
    for entry in entries[-HISTORY_SHOWN:]:
        if not isinstance(entry, dict):
            continue
        at = integer(entry.get("at"))
        history.append(
            Attempt(
                at=Moment(at, now) if at is not None else None,
                attempt=integer(entry.get("attempt")),
                outcome=_shown(entry.get("outcome", "")),
                detail=_shown(entry.get("detail", "")),
            )
        )
    return history, True


def _shown(value: object) -> str:
    if isinstance(value, str):
        return text(value, DETAIL_CHARS)
    try:
        return text(json.dumps(value, ensure_ascii=False), DETAIL_CHARS)
    except (ValueError, RecursionError, TypeError):
        return ""


def job_detail(queue: str, job_id: str) -> JobDetail | None:
    """Everything about one job, or None when neither its hash nor any set holds it."""
    keys = queue_keys(queue)
    notes: list[str] = []
    now = redis_now()
    found = record.stored_job(keys, job_id, notes)
    stored, spec, scores = found.hash, found.spec, list(found.scores.values())
    hash_fields = {text(name): text(value) for name, value in stored.items()}
    fields = job_fields(hash_fields, None if spec is None else text(spec))
    state = next((s for s, score in zip(STATES, scores, strict=True) if score is not None), None)
    if not fields and state is None and not notes:
        return None
    score = scores[STATES.index(state)] if state else None
    args, args_ok = _pretty(fields.get(JobField.ARGS, fields.get(JobField.RAW)), "[]")
    kwargs, kwargs_ok = _pretty(fields.get(JobField.KWARGS), "{}")
    history, history_ok = _history(fields.get(JobField.HISTORY), now)
    created = ulid_ms(job_id)

    def shown(name: str) -> str:
        return text(fields.get(name, ""), DETAIL_CHARS)

    return JobDetail(
        queue=queue,
        id=job_id,
        state=state,
        at=Moment(score, now) if score is not None else None,
        now_ms=now,
        task=shown(JobField.TASK),
        args=args,
        kwargs=kwargs,
        args_valid=args_ok and kwargs_ok,
        key=shown(JobField.KEY),
        attempts=integer(fields.get(JobField.ATTEMPTS)) or 0,
        max_attempts=integer(fields.get(JobField.MAX_ATTEMPTS)),
        visibility_ms=integer(fields.get(JobField.VISIBILITY_MS)),
        created=Moment(created, now) if created is not None else None,
        token=shown(JobField.TOKEN),
        error=shown(JobField.ERROR),
        traceback=shown(JobField.TRACEBACK),
        reason=shown(JobField.REASON),
        history=history,
        history_valid=history_ok,
        missing=not fields,
        notes=notes,
        trace_id=trace_id(fields.get(JobField.TRACE)),
    )
