"""Django's error reports (the DEBUG 500 page, the e-mails to ADMINS) without the passwords
of URL-shaped values.

Django hides a setting whose *name* looks secret (``PASSWORD``, ``SECRET_KEY``, ...), but not
the password inside a value: ``REDIS_URL = "redis://:pw@host"``, ``CELERY_BROKER_URL``,
``DELAYQUEUE["REDIS_URL"]``, the same URLs in the environment the page lists under META, and
a frame's local variable that holds one. This filter shows each such value with its
userinfo and secret-looking query parameters replaced by ``***`` (delayqueue/redaction.py),
the rest of the URL intact::

    DEFAULT_EXCEPTION_REPORTER_FILTER = "delayqueue.observability.error_reports.SecretUrlsFilter"
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.views.debug import SafeExceptionReporterFilter

from delayqueue.redaction import redact


class SecretUrlsFilter(SafeExceptionReporterFilter):
    """Django's filter, and every URL in a setting, META value or frame variable redacted."""

    def cleanse_setting(self, key: Any, value: Any) -> Any:
        return _scrubbed(super().cleanse_setting(key, value))

    def cleanse_special_types(self, request: HttpRequest | None, value: Any) -> Any:
        return _scrubbed(super().cleanse_special_types(request, value))


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str) and "://" in value:
        return redact(value)
    return value
