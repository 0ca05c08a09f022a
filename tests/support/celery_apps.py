"""Celery apps a test makes for itself: on a broker database no Celery worker consumes, or
on a broker of its own; the fixture ``close_what_tests_made`` (tests/conftest.py) closes
them after the test."""

from __future__ import annotations

from celery import Celery


def parked_broker_url() -> str:
    """A broker database no Celery worker consumes, so what is published stays there."""
    from django.conf import settings

    return str(settings.CELERY_BROKER_URL).rsplit("/", 1)[0] + "/2"


_apps_made: list[Celery] = []


def celery_app_on(broker_url: str) -> Celery:
    """A Celery app with the suite's tasks and a broker of its own (closed after the test
    that made it, by ``close_apps_made``)."""
    from tests.support import jobs

    app = Celery(broker=broker_url)
    for name, task in jobs.record.app.tasks.items():
        app.tasks[name] = task
    _apps_made.append(app)
    return app


def close_apps_made() -> None:
    """Close the broker connections of every app ``celery_app_on`` made so far."""
    while _apps_made:
        # the broker connections of the app's pool (Celery.close() would only drop the pool
        # and deregister the app, so shared tasks imported later would miss the current app)
        app = _apps_made.pop()
        pool = getattr(app, "_pool", None)
        setattr(app, "_pool", None)  # noqa: B010  (a later use makes a new pool)
        if pool is not None:
            pool.force_close_all()
