"""How an event goes out: a log line on ``delayqueue.jobs`` with the job's fields as
``extra`` (built only when its level is enabled), and a Django signal sent robustly (a
receiver that raises is logged on ``delayqueue.signals``, never raised). ``events`` says what
each event is; this module is how every one of them is said."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from django.dispatch import Signal

from delayqueue import signals

logger = logging.getLogger("delayqueue.jobs")
signal_logger = logging.getLogger("delayqueue.signals")

DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR


def send(signal: Signal, sender: str, **kwargs: Any) -> None:
    for receiver, result in signal.send_robust(sender, **kwargs):
        if isinstance(result, Exception):
            name = next((n for n, s in signals.ALL.items() if s is signal), "?")
            signal_logger.error(
                "a receiver of job_%s (%r) raised %s: %s; the transition stands",
                name,
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
