"""A schedule's operator acts report their events as every transition does: run now
(``job_scheduled``), pause (``schedule_paused``) and resume (``schedule_resumed``), from the
admin and from the command line, with their log lines, on the suite's real Redis."""

from __future__ import annotations

import logging
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command

from delayqueue.engine.keys import queue_keys
from delayqueue.periodic import planner
from tests.support.admin_pages import url, user_client
from tests.support.recording import recording
from tests.support.states import redis_ms

Q = "periodic"
MINUTE = 60_000
RECORD = "tests.support.jobs.record"


def scheduled_at(r: redis.Redis, job_id: str) -> float | None:
    return r.zscore(queue_keys(Q).scheduled, job_id)


@pytest.mark.django_db
def test_run_now_from_the_admin_and_the_command_line_sends_job_scheduled(
    django_user_model: Any,
    declare: Callable[..., None],
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A schedule's extra run is a job written as any other: ``job_scheduled`` (sender
    "admin") with its id, the schedule's task and its due time, and its log line."""
    declare("tick", every=60)
    planner.reconcile()
    client = user_client(django_user_model, "runner", "view_jobs", "run_schedules")
    with recording() as recorder, caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        done = client.post(url("schedule_act"), {"action": "run_now", "name": "tick"})
        assert done.status_code in (200, 302)
        call_command("delayqueue", "schedules", "run-now", "tick", "--yes", stdout=StringIO())
    sent = recorder.of("scheduled")
    assert len(sent) == 2 and recorder.senders("scheduled") == {"admin"}
    for one in sent:
        assert one["task"] == RECORD and one["queue"] == Q and one["outcome"] == "created"
        assert one["due_ms"] == scheduled_at(r, one["job_id"])
    logged = [rec for rec in caplog.records if getattr(rec, "transition", "") == "scheduled"]
    assert [rec.job_id for rec in logged] == [one["job_id"] for one in sent]  # type: ignore[attr-defined]


@pytest.mark.django_db
def test_pausing_and_resuming_a_schedule_sends_its_signals_and_logs_them(
    django_user_model: Any,
    declare: Callable[..., None],
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """From the admin and from the command line: ``schedule_paused`` when it was running,
    ``schedule_resumed`` with the instant of the occurrence it planned."""
    declare("tick", every=60)
    planner.reconcile()
    pauser = user_client(django_user_model, "pauser", "view_jobs", "pause_schedules")
    with recording() as recorder, caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        pauser.post(url("schedule_act"), {"action": "pause", "name": "tick"})
        pauser.post(url("schedule_act"), {"action": "pause", "name": "tick"})  # paused: no event
        call_command("delayqueue", "schedules", "resume", "tick", stdout=StringIO())
        call_command("delayqueue", "schedules", "pause", "tick", "--yes", stdout=StringIO())
    assert recorder.of("schedule_paused") == [{"queue": Q, "schedule": "tick"}] * 2
    [resumed] = recorder.of("schedule_resumed")
    assert resumed["schedule"] == "tick" and resumed["queue"] == Q
    assert resumed["next_ms"] > redis_ms(r) - MINUTE
    assert recorder.senders("schedule_paused") == {"admin"}
    logged = [getattr(rec, "transition", "") for rec in caplog.records]
    assert logged.count("schedule_paused") == 2 and logged.count("schedule_resumed") == 1
