"""Which declared schedule a job is an occurrence of, for the schedules that report to a
Sentry cron monitor (``monitor=True``, or all with ``DELAYQUEUE["SENTRY_CRONS"]``;
integrations/sentry_crons.py). An occurrence's job id has the schedule name's hash as its
random part (``identity``), so the Celery side knows it from the id alone: nothing is
stored. The app's ``ready()`` hands ``monitored`` to the integration (``watch_monitored``):
the Celery side does not import periodic jobs' declarations, which build with the
producer's API."""

from __future__ import annotations

from delayqueue.conf import Settings, get_settings
from delayqueue.integrations import sentry_crons
from delayqueue.periodic import declarations
from delayqueue.periodic.identity import occurrence_id

_monitored: tuple[Settings | None, dict[str, declarations.Declared]] = (None, {})


def monitored(job_id: str) -> declarations.Declared | None:
    """The monitored schedule ``job_id`` is an occurrence of, or None."""
    global _monitored
    config = get_settings()
    if _monitored[0] is not config:  # once per settings (a change makes a new object)
        every = bool(config.sentry_crons)
        found: dict[str, declarations.Declared] = {}
        for declared in declarations.declared():
            if every or declared.monitor:
                found.setdefault(occurrence_id(declared.name, 0)[10:], declared)
        _monitored = (config, found)
    return _monitored[1].get(job_id[10:])


def watch_monitored() -> None:
    sentry_crons.monitored = monitored
