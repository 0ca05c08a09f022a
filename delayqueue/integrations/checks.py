"""System checks of the integrations' settings (docs/tracing.md): delayqueue.E040 for
TRACE_SCHEDULING, E041 for the Sentry cron monitors' SENTRY_* settings. Registered by the
app's ``ready()``."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from delayqueue.conf import DEFAULTS

TRACE_SCHEDULING = ("span", "context")


def _minutes(value: object, optional: bool) -> bool:
    if value is None:
        return optional
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 10_000


@register()
def check_integration_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(settings, "DELAYQUEUE", {})
    if not isinstance(user, dict):
        return []  # E001 says so
    config = {**DEFAULTS, **user}
    messages: list[CheckMessage] = []
    if config["TRACE_SCHEDULING"] not in TRACE_SCHEDULING:
        messages.append(
            Error(
                f"DELAYQUEUE['TRACE_SCHEDULING'] is {config['TRACE_SCHEDULING']!r}.",
                hint='"context" (the active span\'s context, the default) or "span" (a create span '
                "per job).",
                id="delayqueue.E040",
            )
        )
    wrong = [
        name
        for name, ok in (
            ("SENTRY_CRONS", isinstance(config["SENTRY_CRONS"], bool)),
            ("SENTRY_CHECKIN_MARGIN", _minutes(config["SENTRY_CHECKIN_MARGIN"], False)),
            ("SENTRY_MAX_RUNTIME", _minutes(config["SENTRY_MAX_RUNTIME"], True)),
        )
        if not ok
    ]
    for name in wrong:
        messages.append(
            Error(
                f"DELAYQUEUE['{name}'] is {config[name]!r}.",
                hint="SENTRY_CRONS is True or False; SENTRY_CHECKIN_MARGIN a whole number of "
                "minutes from 1; SENTRY_MAX_RUNTIME too, or None (the visibility timeout).",
                id="delayqueue.E041",
            )
        )
    return messages
