"""An attempt as the optional integrations see it (docs/tracing.md): its OpenTelemetry span
and, for an occurrence of a monitored schedule, its Sentry check-ins. Each is a no-op
without its library."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from delayqueue.integrations import otel, sentry_crons


def around_attempt(attempt: Any, call: Callable[[], Any], settle: Any) -> tuple[Any, Any]:
    """An attempt's call and settle (runner/attempt.py) with its span and its check-ins."""
    call, settle = otel.around_attempt(attempt, call, settle)
    return sentry_crons.around_attempt(attempt, call, settle)
