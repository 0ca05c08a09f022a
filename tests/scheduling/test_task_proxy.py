"""``@delayed_task`` returns a proxy like Celery's ``shared_task``: it follows the current
app, and remembers the task it found for each."""

from __future__ import annotations

from typing import Any

import pytest
from celery import Celery
from celery._state import get_current_app
from celery.local import Proxy

from delayqueue import delayed_task
from tests.support import jobs


def test_the_task_is_the_current_apps_own_and_follows_a_change_of_app() -> None:
    assert isinstance(jobs.record, Proxy)  # as shared_task returns, so as users expect
    home = get_current_app()
    mine: Any = jobs.record._get_current_object()
    name = jobs.record.name
    bound = jobs.record.delay_for
    assert home.tasks[name] is mine and getattr(bound, "__self__", None) is mine

    other = Celery("other", set_as_current=False)
    other.finalize()  # registers its own copy of every shared task
    try:
        other.set_current()
        theirs = jobs.record._get_current_object()
        assert theirs is other.tasks[name] and theirs is not mine
        assert jobs.record.app is other
    finally:
        home.set_current()
    assert jobs.record._get_current_object() is mine and jobs.record.app is home


def test_applying_it_to_a_task_is_refused() -> None:
    with pytest.raises(TypeError, match="apply it once, to the plain function"):
        delayed_task(jobs.record)


def test_applying_it_to_a_task_object_is_refused() -> None:
    with pytest.raises(TypeError, match="apply it once, to the plain function"):
        delayed_task(getattr(jobs.record, "_get_current_object")())  # noqa: B009
