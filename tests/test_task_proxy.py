"""``@delayed_task`` returns a proxy like Celery's ``shared_task``: it follows the current
app, and remembers the task it found for each."""

from __future__ import annotations

from celery import Celery
from celery._state import get_current_app
from celery.local import Proxy

from tests import jobs


def test_the_task_is_the_current_apps_own_and_follows_a_change_of_app() -> None:
    assert type(jobs.record) is Proxy  # what shared_task returns, so what users expect
    home = get_current_app()
    mine = jobs.record._get_current_object()
    assert home.tasks[mine.name] is mine and jobs.record.delay_for.__self__ is mine

    other = Celery("other", set_as_current=False)
    other.finalize()  # registers its own copy of every shared task
    try:
        other.set_current()
        theirs = jobs.record._get_current_object()
        assert theirs is other.tasks[mine.name] and theirs is not mine
        assert jobs.record.app is other
    finally:
        home.set_current()
    assert jobs.record._get_current_object() is mine and jobs.record.app is home
