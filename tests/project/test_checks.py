"""System checks: each id fires on the setting it is about, and not on good settings."""

from __future__ import annotations

from typing import Any

import pytest
from celery import current_app
from django.core.checks import run_checks
from django.test import override_settings


def check_ids(**delayqueue: Any) -> set[str]:
    # A CELERY_APP of tests/setups/ is imported by the check, and making a Celery app makes
    # it Celery's current app for the whole process: the next test's checks would read it.
    kept = current_app._get_current_object()  # type: ignore[attr-defined]
    try:
        with override_settings(DELAYQUEUE=delayqueue):
            return {m.id for m in run_checks() if m.id and m.id.startswith("delayqueue.")}
    finally:
        kept.set_current()


def test_good_settings_pass() -> None:
    assert check_ids(REDIS_URL="redis://127.0.0.1:6379/0") == set()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"REDIS_URL": "redis://x", "BATCH_SIZ": 10}, "delayqueue.E002"),
        ({"REDIS_URL": "http://example.com"}, "delayqueue.E003"),
        ({"REDIS_URL": "redis://x", "CLAIM_SIZE": 0}, "delayqueue.E004"),
        ({"REDIS_URL": "redis://x", "MAX_DELAY": "a year"}, "delayqueue.E004"),
        ({"REDIS_URL": "redis://x", "DISPATCH_MODE": "fast"}, "delayqueue.E005"),
        ({"REDIS_URL": "redis://x/0?auth_token=abc"}, "delayqueue.E007"),
        ({"REDIS_URL": "redis://x:notaport/0"}, "delayqueue.E007"),
        ({"REDIS_URL": "redis://x", "VISIBILITY_TIMEOUT": 0.0004}, "delayqueue.E004"),
        ({"REDIS_URL": "redis://x", "MAX_DELAY": 1e300}, "delayqueue.E004"),
        ({"REDIS_URL": "redis://x", "SAFETY_POLL": 61}, "delayqueue.E006"),
        ({"REDIS_URL": "redis://x", "DISPATCH_AHEAD": 1.5}, "delayqueue.E004"),
        ({"REDIS_URL": "redis://x", "DISPATCH_AHEAD": -0.01}, "delayqueue.E004"),
        ({"REDIS_URL": "redis://x", "DISPATCH_AHEAD": "50ms"}, "delayqueue.E004"),
        ({"REDIS_URL": "redis://x", "VISIBILITY_TIMEOUT": 1, "SAFETY_POLL": 5}, "delayqueue.W002"),
    ],
)
def test_each_check_fires(settings: dict[str, Any], expected: str) -> None:
    assert expected in check_ids(**settings)


def test_not_a_dict() -> None:
    with override_settings(DELAYQUEUE=["redis://x"]):
        assert "delayqueue.E001" in {m.id for m in run_checks()}


def test_no_redis_configured_warns() -> None:
    with override_settings(DELAYQUEUE={}, CELERY_BROKER_URL=None):
        assert "delayqueue.W001" in {m.id for m in run_checks()}


@pytest.mark.parametrize(
    ("celery_app", "expected"),
    [
        ("tests.setups.no_such_module:app", {"delayqueue.E012"}),
        ("tests.setups.include_app:no_such_app", {"delayqueue.E012"}),
        ("tests.setups.pickle_app:app", {"delayqueue.E013"}),
        ("tests.setups.stripped_app:app", {"delayqueue.E014"}),
        ("tests.setups.include_app:app", set()),
        ("tests.setups.two_apps:first", set()),
    ],
)
def test_a_celery_app_that_cannot_run_delayqueues_messages_is_an_error(
    celery_app: str, expected: set[str]
) -> None:
    assert check_ids(REDIS_URL="redis://127.0.0.1:6379/0", CELERY_APP=celery_app) == expected


def test_a_renamed_setting_works_under_its_old_name_with_a_warning() -> None:
    from delayqueue.conf import get_settings

    with pytest.warns(DeprecationWarning):  # the settings are read by other checks too
        assert check_ids(REDIS_URL="redis://x", BATCH_SIZE=7) == {"delayqueue.W004"}
        assert "delayqueue.E004" in check_ids(REDIS_URL="redis://x", BATCH_SIZE=0)
    with override_settings(DELAYQUEUE={"REDIS_URL": "redis://x", "BATCH_SIZE": 7}):
        with pytest.warns(DeprecationWarning, match=r"\['BATCH_SIZE'\] is renamed 'CLAIM_SIZE'"):
            assert get_settings().claim_size == 7
    given_both = {"REDIS_URL": "redis://x", "BATCH_SIZE": 7, "CLAIM_SIZE": 9}
    with override_settings(DELAYQUEUE=given_both), pytest.warns(DeprecationWarning):
        assert get_settings().claim_size == 9  # the new name wins
