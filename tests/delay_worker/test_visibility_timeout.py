"""One visibility timeout governs a job's whole time in flight: the delay worker's
(``run_delay_worker --visibility-timeout`` or VISIBILITY_TIMEOUT where it runs) from the
dispatch, and again from the moment the task begins on the Celery side, whatever the
Celery side's own setting; a job's own ``visibility_timeout`` before either."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from tests.support import jobs
from tests.support.processes import Process
from tests.support.waiting import wait_for


@pytest.mark.parametrize(
    "probe", [jobs.single_deadline_probe, jobs.deadline_probe], ids=["single", "batch"]
)
def test_the_delay_workers_visibility_timeout_holds_once_the_task_has_begun(
    r: redis.Redis,
    celery_worker: Process,
    delay_worker: Callable[..., Process],
    probe: object,
) -> None:
    delay_worker("--visibility-timeout", "4")
    probe.delay_for("p", 0, seconds=0.2, on_commit=False)  # type: ignore[attr-defined]
    [report] = wait_for(lambda: jobs.ran("deadline"), 30)
    left = float(str(report["tag"]).split()[1])
    # begun on the Celery side (whose VISIBILITY_TIMEOUT is 300 s): 4 s from then, not 300
    assert 2.5 < left <= 4.0, left
