"""Sentry cron monitors for periodic jobs (docs/tracing.md), when ``sentry-sdk`` is installed
(``delayqueue[sentry]``) and initialised, for the schedules with ``monitor=True`` or every
schedule with ``DELAYQUEUE["SENTRY_CRONS"] = True``.

The one module that imports sentry_sdk. The check-ins are sent from the Celery side, by the
attempt of an occurrence's job, which runs once whatever the number of delay workers: an
``in_progress`` check-in when an attempt starts, ``ok`` when it succeeded, ``error`` when the
job went to dead (a failure that will be retried leaves the check-in in progress; the next
attempt says ``in_progress`` again under the same check-in id). Each carries the schedule's
monitor config (its cron line or interval, its timezone, a check-in margin, a max runtime),
so the check-ins themselves create the monitor and keep it in step; the slug is the
schedule's name. An occurrence that never ran (missed) sends nothing: Sentry, which knows
the schedule, shows it as missed.

The job is known as an occurrence by its id (``periodic.monitored``: its random part is the
schedule name's hash), against the schedules this process declares: nothing is stored.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

from delayqueue.conf import Settings, get_settings

try:
    import sentry_sdk
    from sentry_sdk.crons import capture_checkin
except ImportError:  # the optional extra is not installed
    sentry_sdk = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

_NAMESPACE = uuid.UUID("6f1c2b1e-3d0a-4c55-9a57-0d5c1f0e7a01")  # check-in ids of occurrences
_UNITS = (("day", 1440), ("hour", 60), ("minute", 1))


class AttemptLike(Protocol):
    job_id: str


class Schedule(Protocol):
    """What a monitor reads of a declared schedule (periodic.declarations.Declared)."""

    @property
    def name(self) -> str: ...
    @property
    def cron(self) -> str | None: ...
    @property
    def every_ms(self) -> int | None: ...
    @property
    def timezone(self) -> str: ...


def monitor_config(declared: Schedule, config: Settings) -> dict[str, Any] | None:
    """Sentry's monitor config for a schedule, or None when Sentry cannot express its rule
    (an interval that is not a whole number of minutes)."""
    if declared.cron is not None:
        schedule: dict[str, Any] = {"type": "crontab", "value": declared.cron}
    elif declared.every_ms is not None and declared.every_ms % 60_000 == 0:
        minutes = declared.every_ms // 60_000
        unit, size = next((unit, size) for unit, size in _UNITS if minutes % size == 0)
        schedule = {"type": "interval", "value": minutes // size, "unit": unit}
    else:
        return None
    max_runtime = config.sentry_max_runtime
    if max_runtime is None:  # the longest an attempt runs before it is reaped
        max_runtime = math.ceil(float(config.visibility_timeout) / 60)
    return {
        "schedule": schedule,
        "timezone": declared.timezone,
        "checkin_margin": int(config.sentry_checkin_margin),
        "max_runtime": max(1, int(max_runtime)),
    }


def _check_in(slug: str, check_in_id: str, status: str, **extra: Any) -> None:
    try:
        capture_checkin(monitor_slug=slug, check_in_id=check_in_id, status=status, **extra)
    except Exception:
        logger.warning("Sentry check-in of %s failed", slug, exc_info=True)


class _Monitored:
    """One attempt of an occurrence, with its check-ins."""

    def __init__(self, attempt: Any, declared: Schedule, config: dict[str, Any]) -> None:
        self.attempt, self.declared, self.config = attempt, declared, config
        self.check_in_id = uuid.uuid5(_NAMESPACE, attempt.job_id).hex
        self.inner_call: Callable[[], Any] = lambda: None
        self.inner: Any = None
        self.raised = False
        self.began = 0.0

    def call(self) -> Any:
        self.began = time.monotonic()
        _check_in(self.declared.name, self.check_in_id, "in_progress", monitor_config=self.config)
        try:
            return self.inner_call()
        except Exception:
            self.raised = True
            raise

    def add(self, call: Any, report: Callable[[Any], None], unsent: str) -> None:
        runtime = time.monotonic() - self.began

        def reported(reply: Any) -> None:
            try:
                report(reply)
            finally:
                status = "error" if reply == "dead" else None if self.raised else "ok"
                if status is not None:
                    _check_in(
                        self.declared.name,
                        self.check_in_id,
                        status,
                        duration=runtime,
                        monitor_config=self.config,
                    )

        self.inner.add(call, reported, unsent)


# The monitored schedule a job id is an occurrence of, or None (set by the app's ready():
# periodic/monitored.py)
monitored: Callable[[str], Schedule | None] = lambda job_id: None  # noqa: E731


def around_attempt(
    attempt: AttemptLike, call: Callable[[], Any], settle: Any
) -> tuple[Callable[[], Any], Any]:
    """``call`` and ``settle`` of one attempt, with check-ins when it is an occurrence of a
    monitored schedule and Sentry is initialised."""
    if sentry_sdk is None:
        return call, settle
    try:
        declared = monitored(attempt.job_id)
        if declared is None or not sentry_sdk.get_client().is_active():
            return call, settle
        config = monitor_config(declared, get_settings())
    except Exception:
        logger.warning("Sentry cron monitor of job %s failed", attempt.job_id, exc_info=True)
        return call, settle
    if config is None:
        logger.warning(
            "schedule %r is not monitored: Sentry's intervals are whole minutes",
            declared.name,
        )
        return call, settle
    monitor = _Monitored(attempt, declared, config)
    monitor.inner_call, monitor.inner = call, settle
    return monitor.call, monitor
