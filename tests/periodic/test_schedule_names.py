"""A schedule's name is the same rule wherever it is declared (``@periodic_task(name=...)``
and ``DELAYQUEUE["SCHEDULES"]``): a str of 1 to 200 printable characters on one line.
Anything else is refused where it is declared, and by the system check, before a delay
worker meets it at start."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from delayqueue import periodic_task
from delayqueue.errors import InvalidOption
from delayqueue.periodic import declarations

RECORD = "tests.support.jobs.record"
BAD_NAMES: list[Any] = [
    5,
    b"x",
    None.__class__,
    "",
    "x" * 201,
    "a\nb",
    "a\rb",
    "a\x00b",
    "a\u2028b",
    "a\x1b]0;pwned\x07",
    "a\u202eb",  # right-to-left override
    "\udcff",
]
GOOD_NAMES = ["x", "x" * 200, "nightly report (Europe/Berlin)", "rapport-été", "報告"]


@pytest.fixture(autouse=True)
def no_declarations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(declarations, "_in_code", {})


def _check_ids(schedules_setting: Any) -> set[str]:
    with override_settings(
        DELAYQUEUE={"REDIS_URL": "redis://127.0.0.1:1/0", "SCHEDULES": schedules_setting}
    ):
        return {m.id for m in run_checks() if m.id and m.id.startswith("delayqueue.E02")}


@pytest.mark.parametrize("name", BAD_NAMES, ids=repr)
def test_the_decorator_refuses_a_name_that_is_no_printable_line(name: Any) -> None:
    with pytest.raises(InvalidOption, match="printable characters on one line"):
        periodic_task(every=3600, name=name)
    assert declarations.declared() == []


@pytest.mark.parametrize("name", BAD_NAMES[3:], ids=repr)  # a dict's keys: str ones
def test_settings_refuse_the_same_names_and_the_check_says_so(name: Any) -> None:
    assert _check_ids({name: {"task": RECORD, "every": 60}}) == {"delayqueue.E020"}


@pytest.mark.parametrize("name", [5, b"x"], ids=repr)
def test_settings_refuse_a_name_that_is_no_str(name: Any) -> None:
    assert _check_ids({name: {"task": RECORD, "every": 60}}) == {"delayqueue.E020"}


@pytest.mark.parametrize(("index", "name"), list(enumerate(GOOD_NAMES)))
def test_both_take_the_same_good_names(index: int, name: str) -> None:
    assert _check_ids({name: {"task": RECORD, "every": 60}}) == set()

    def hourly() -> None:
        """A periodic task made in a test."""

    hourly.__name__ = f"hourly_{index}"  # one Celery task per case
    periodic_task(every=3600, name=name, queue="periodic")(hourly)
    [declared] = declarations.declared()
    assert declared.name == name
