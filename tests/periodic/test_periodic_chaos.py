"""The periodic chaos, short form: three delay workers, one SIGKILLed every few seconds and
started again, an every-second schedule for 20 seconds; every occurrence of the window ran
exactly once. Long form: ``python -m tests.chaos.periodic --seconds 120``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis

from tests.chaos import periodic as periodic_chaos


def test_every_occurrence_runs_once_while_delay_workers_are_killed(
    r: redis.Redis, celery_worker: Any, tmp_path: Path
) -> None:
    outcome = periodic_chaos.run(tmp_path, seconds=20, workers=3, seed=20261125)
    assert outcome.kills >= 5
    assert outcome.expected >= 12
    assert outcome.ok(), (outcome.lost, outcome.doubled)
    assert outcome.ran_once == outcome.expected
