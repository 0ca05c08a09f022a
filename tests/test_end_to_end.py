"""End to end: real delay workers hand jobs to a real Celery worker."""

from __future__ import annotations

import pytest

from tests import jobs
from tests.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_job_runs_through_celery_and_is_acked(celery_worker, delay_worker, r):
    delay_worker("--queues", "tests")
    job = jobs.record.delay_for("hello", seconds=0.3)
    runs = wait_for(lambda: jobs.ran("record"))
    assert runs[0]["tag"] == "hello"
    wait_for(
        lambda: r.zcard("dq:{tests}:inflight") == 0 and not r.exists(f"dq:{{tests}}:job:{job.id}")
    )
