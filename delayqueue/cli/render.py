"""What the command line prints: the status tables (``rich``), one job's details, the health
verdict, and the JSON documents of ``--json``."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any, TextIO

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from delayqueue.cli.status import Health, Snapshot, epoch_iso
from delayqueue.services.display import Moment, relative_text
from delayqueue.services.job_detail import JobDetail

WIDE = 200  # columns of a console that is not a terminal (a log, a pipe): no wrapping
HISTORY_SHOWN = 10

STATE_NAMES = {"scheduled": "scheduled", "inflight": "in flight", "dead": "dead"}


def escaped(text: str) -> str:
    """``text`` fit for a terminal: each character Python does not call printable but newline
    and tab written as its backslash escape: controls and format characters (what Redis may
    hold in a task's name or an error: ``\x1b]0;...\x07`` retitles a terminal), and the
    line and paragraph separators (U+2028, U+2029) and spaces other than " ", which would
    break or disguise a line."""
    if text.isprintable():
        return text
    return "".join(
        char if char in "\n\t" or char.isprintable() else repr(char)[1:-1] for char in text
    )


def console(out: TextIO) -> Console:
    terminal = out.isatty()
    return Console(file=out, width=None if terminal else WIDE, force_terminal=terminal or None)


def _when(moment: Moment | None) -> str:
    if moment is None:
        return "-"
    return f"{moment.shown} ({moment.relative})"


def _age(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "corrupt time"
    return relative_text(-seconds * 1000) if seconds >= 1 else "now"


def _rate(value: float) -> str:
    return f"{value:g}"


def status_tables(snap: Snapshot) -> Group:
    queues = Table(title="Queues", title_justify="left", expand=False)
    for name, justify in (
        ("Queue", "left"), ("Scheduled", "right"), ("In flight", "right"), ("Dead", "right"),
        ("Paused", "left"), ("Workers", "right"), ("Next due", "left"),
        ("Oldest overdue", "left"), ("Dispatched/min", "right"), ("Acked/min", "right"),
        ("Failed/min", "right"), ("Dead/min", "right"),
    ):  # fmt: skip
        queues.add_column(name, justify=justify)  # type: ignore[arg-type]
    for q in snap.queues:
        queues.add_row(
            q.name,
            f"{q.scheduled:,}",
            f"{q.inflight:,}",
            Text(f"{q.dead:,}", style="bold red" if q.dead else ""),
            Text("paused", style="yellow") if q.paused else "no",
            Text(str(len(q.workers)), style="" if q.workers else "bold red"),
            _when(q.next_due),
            Text(_age(q.overdue_seconds), style="yellow") if q.overdue_seconds else "-",
            _rate(q.last_minute.dispatched),
            _rate(q.last_minute.acked),
            _rate(q.last_minute.failed),
            _rate(q.last_minute.dead),
        )
    if not snap.queues:
        queues.add_row("(no queue known yet)", *[""] * 11)
    workers = Table(title="Live delay workers", title_justify="left")
    for name in ("Worker", "Host", "PID", "Queues", "Dispatched", "Last beat"):
        workers.add_column(name, justify="right" if name in ("PID", "Dispatched") else "left")
    for w in snap.workers:
        workers.add_row(
            w.id,
            w.host,
            str(w.pid or "-"),
            ", ".join(w.queues) or "-",
            f"{w.dispatched:,}",
            _age(w.beat_age_seconds),
        )
    if not snap.workers:
        workers.add_row(Text("none: start manage.py run_delay_worker", style="bold red"))
    parts: list[Any] = [queues, workers]
    parts += [Text(f"note: {note}", style="yellow") for note in snap.notes]
    return Group(*parts)


def _seconds(value: float) -> float | None:
    return round(value, 3) if math.isfinite(value) else None


def status_json(snap: Snapshot) -> dict[str, Any]:
    return {
        "now": epoch_iso(snap.now_ms),
        "queues": [
            {
                "name": q.name,
                "scheduled": q.scheduled,
                "inflight": q.inflight,
                "dead": q.dead,
                "paused": q.paused,
                "next_due": epoch_iso(q.next_due.ms) if q.next_due else None,
                "oldest_overdue_seconds": _seconds(q.overdue_seconds),
                "rates_per_minute": {
                    "last_minute": asdict(q.last_minute),
                    "last_hour": asdict(q.last_hour),
                },
                "workers": q.workers,
            }
            for q in snap.queues
        ],
        "workers": [
            {
                "id": w.id,
                "host": w.host,
                "pid": w.pid,
                "queues": w.queues,
                "dispatched": w.dispatched,
                "last_beat_seconds": _seconds(w.beat_age_seconds),
            }
            for w in snap.workers
        ],
        "notes": snap.notes,
    }


# ---- health -----------------------------------------------------------------------------


def health_lines(verdict: Health) -> list[str]:
    lines = [f"UNHEALTHY: {problem}" for problem in verdict.problems]
    for q in verdict.queues:
        said = "; ".join(q.problems + q.remarks)
        lines.append(f"{'ok' if q.ok else 'UNHEALTHY'} {q.name}" + (f": {said}" if said else ""))
    if not verdict.queues:
        lines.append("no queue known yet")
    lines += [f"note: {remark}" for remark in verdict.remarks]
    if verdict.ok:
        lines.append("healthy")
    return lines


def health_json(verdict: Health) -> dict[str, Any]:
    return {
        "healthy": verdict.ok,
        "max_overdue_seconds": verdict.max_overdue,
        "problems": verdict.problems,
        "remarks": verdict.remarks,
        "queues": [
            {"name": q.name, "healthy": q.ok, "problems": q.problems, "remarks": q.remarks}
            for q in verdict.queues
        ],
    }


# ---- one job ----------------------------------------------------------------------------

_AT_LABEL = {"scheduled": "due", "inflight": "deadline", "dead": "died"}


def _compact(shown: str) -> str:
    """Arguments on one line when their text is JSON (the api pretty-prints them)."""
    value = _parsed(shown)
    return shown if isinstance(value, str) and value == shown else json.dumps(value)


def job_text(job: JobDetail) -> str:
    state = STATE_NAMES[job.state] if job.state else "in no list (moving, or left behind)"
    lines = [
        f"job       {job.id}",
        f"queue     {job.queue}",
        f"state     {state}",
    ]
    if job.state and job.at is not None:
        lines.append(f"{_AT_LABEL[job.state]:<9} {_when(job.at)}")
    attempts = f"{job.attempts} of {job.max_attempts if job.max_attempts is not None else '?'}"
    lines += [
        f"task      {job.task or '-'}",
        f"args      {_compact(job.args)}",
        f"kwargs    {_compact(job.kwargs)}",
        f"key       {job.key or '-'}",
        f"attempts  {attempts}",
        f"created   {_when(job.created)}",
    ]
    if job.visibility_ms is not None:
        lines.append(f"visibility {job.visibility_ms / 1000:g} s")
    if job.reason:
        lines.append(f"reason    {job.reason}")
    if job.error:
        lines.append(f"error     {job.error}")
    if job.missing:
        lines.append("note      its data is gone (only its id is listed)")
    if job.history:
        lines.append("history")
        for attempt in job.history[-HISTORY_SHOWN:]:
            at = attempt.at.shown if attempt.at else "?"
            detail = f": {attempt.detail}" if attempt.detail else ""
            lines.append(f"  {at}  attempt {attempt.attempt or '?'}  {attempt.outcome}{detail}")
    if job.traceback:
        lines += ["traceback", job.traceback.rstrip()]
    lines += [f"note      {note}" for note in job.notes]
    return "\n".join(lines)


def _parsed(shown: str) -> Any:
    """Arguments as JSON values when their text is JSON, else the text as shown."""
    try:
        return json.loads(shown)
    except (ValueError, RecursionError):
        return shown


def job_json(job: JobDetail) -> dict[str, Any]:
    def iso(moment: Moment | None) -> str | None:
        return epoch_iso(moment.ms) if moment is not None else None

    return {
        "id": job.id,
        "queue": job.queue,
        "state": job.state,
        "at": iso(job.at),
        "task": job.task,
        "args": _parsed(job.args),
        "kwargs": _parsed(job.kwargs),
        "key": job.key,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "visibility_ms": job.visibility_ms,
        "created": iso(job.created),
        "error": job.error,
        "reason": job.reason,
        "traceback": job.traceback,
        "history": [
            {"at": iso(a.at), "attempt": a.attempt, "outcome": a.outcome, "detail": a.detail}
            for a in job.history
        ],
        "notes": job.notes,
    }
