"""The demo's DEBUG 500 page shows no password of the Redis and broker URLs: not in the
settings, not in the environment it lists, not in a frame's variables."""

from __future__ import annotations

import sys

from django.test import RequestFactory, override_settings
from django.views.debug import technical_500_response

SECRET = "s3cr3t-pw-Zq"
URL = f"redis://:{SECRET}@redis.internal:6380/5"


def _error_page() -> str:
    request = RequestFactory().get("/orders/", HTTP_X_FORWARDED_FOR="10.0.0.1")
    request.META["REDIS_URL"] = URL  # runserver's environ holds the process's environment
    try:
        broker = f"{URL}?password={SECRET}"  # noqa: F841  (a frame variable the page shows)
        raise RuntimeError("boom")
    except RuntimeError:
        response = technical_500_response(request, *sys.exc_info())
    return response.content.decode()


@override_settings(
    DEBUG=True,
    REDIS_URL=URL,
    CELERY_BROKER_URL=f"{URL}?password={SECRET}",
    DELAYQUEUE={"REDIS_URL": f"sentinel://:{SECRET}@h1:26379;sentinel://:{SECRET}@h2:26379"},
)
def test_the_debug_page_shows_the_urls_without_their_passwords() -> None:
    page = _error_page()
    assert SECRET not in page
    assert "redis.internal:6380/5" in page  # the rest of the URL is still there to read
    assert "h2:26379" in page
