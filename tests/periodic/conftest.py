"""Fixtures of the periodic tests."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from delayqueue.periodic import declarations
from delayqueue.periodic import declare as declaring


@pytest.fixture
def declare(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Declare schedules in code for one test, on queue "periodic" (the registry is this
    test's alone)."""
    monkeypatch.setattr(declarations, "_in_code", {})

    def add(
        name: str,
        *,
        cron: str | None = None,
        every: float | None = None,
        timezone: str | None = None,
        missed: str = "once",
        args: tuple[Any, ...] | None = None,
        task: str = "tests.support.jobs.record",
    ) -> None:
        build = declaring._builder(task, args if args is not None else (name,), None, "periodic")
        declarations.add(
            declaring._declared(
                name, task, cron=cron, every=every, timezone=timezone, missed=missed,
                source="code", build=build,
            )
        )  # fmt: skip

    yield add
