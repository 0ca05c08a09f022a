"""How an event goes out: a log line on ``delayqueue.jobs`` with the job's fields as
``extra`` (built only when its level is enabled), and a Django signal sent robustly (a
receiver that raises is logged on ``delayqueue.signals``, never raised). ``events`` declares
each event (an ``Event``); ``emit`` is how every one of them is said."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.dispatch import Signal

from delayqueue import signals

logger = logging.getLogger("delayqueue.jobs")
signal_logger = logging.getLogger("delayqueue.signals")

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR


Fields = dict[str, Any]


@dataclass(frozen=True)
class Event:
    """One event, declared: its log line (``message`` at ``level``, its arguments
    ``text(fields)``; the extras every line carries plus ``extras`` as they are and
    ``computed(fields)``) and its signal (sent with the ``sent`` fields, None for a field
    the caller did not give). ``emit`` says it."""

    transition: str  # the line's ``transition`` extra
    signal: Signal | None
    level: int
    message: str
    text: Callable[[Fields], tuple[Any, ...]]
    extras: tuple[str, ...] = ()
    sent: tuple[str, ...] = ("queue", "job_id")
    computed: Callable[[Fields], Fields] | None = None

    def wanted(self, level: int | None = None) -> bool:
        """Whether ``emit`` at ``level`` would log or send anything: a caller checks it
        before building the fields (no work on a hot path when no one listens)."""
        return logger.isEnabledFor(self.level if level is None else level) or bool(
            self.signal is not None and self.signal.receivers
        )


def emit(event: Event, sender: str, level: int | None = None, /, **fields: Any) -> None:
    """Say ``event``: its line when its level is enabled, its signal when it has receivers
    (each built only then)."""
    level = event.level if level is None else level
    if logger.isEnabledFor(level):
        get = fields.get
        extra = {name: get(name) for name in event.extras} if event.extras else {}
        if event.computed is not None:
            extra.update(event.computed(fields))
        log(
            level,
            event.message,
            event.text(fields),
            event.transition,
            fields["queue"],
            get("job_id"),
            get("task"),
            get("attempt"),
            get("lateness_ms"),
            **extra,
        )
    if event.signal is not None and event.signal.receivers:
        send(event.signal, sender, **{name: fields.get(name) for name in event.sent})


def signal_name(signal: Signal) -> str:
    return next((n for n, s in vars(signals).items() if s is signal), "?")


def send(signal: Signal, sender: str, **kwargs: Any) -> None:
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            name = next((n for n, s in signals.ALL.items() if s is signal), "?")
            signal_logger.error(
                "a receiver of %s (%r) raised %s: %s; the transition stands",
                signal_name(signal),
                receiver,
                type(result).__qualname__,
                result,
                extra={
                    "transition": name,
                    "queue": kwargs.get("queue"),
                    "job_id": kwargs.get("job_id"),
                },
            )


def log(
    level: int,
    message: str,
    message_args: tuple[Any, ...],
    transition: str,
    queue: str,
    job_id: str | None,
    task: str | None = None,
    attempt: int | None = None,
    lateness_ms: int | None = None,
    **more: Any,
) -> None:
    extra = {
        "transition": transition,
        "queue": queue,
        "job_id": job_id,
        "task": task,
        "attempt": attempt,
        "lateness_ms": lateness_ms,
        **more,
    }
    logger.log(level, message, *message_args, extra=extra)


def when(due_ms: int) -> str:
    try:
        return datetime.fromtimestamp(due_ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
    except (ValueError, OverflowError, OSError):
        return f"{due_ms} ms"
