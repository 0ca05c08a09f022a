"""The operators' state changes report their events as every transition does: force back,
delete and purge dead jobs, pause and resume a queue, from the admin (Django's test client)
and from the command line (``call_command``), on the suite's real Redis: the signal with its
arguments, and the log line with its extras. And a write no one listens to is the engine's
call as it is (nothing built for its event)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command

from delayqueue import signals
from delayqueue.engine import transitions
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.observability import reported
from delayqueue.producer import writes
from delayqueue.producer.job_spec import spec
from tests.support import jobs
from tests.support.admin_pages import Q, post, user_client
from tests.support.recording import Recorder, recording
from tests.support.states import make_dead, make_inflight, schedule

pytestmark = pytest.mark.django_db


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with recording() as recorder:
        yield recorder


@pytest.fixture
def admin(django_user_model: Any) -> Any:
    return user_client(django_user_model, "op", "view_jobs", "change_jobs", "delete_jobs")


def lines(caplog: pytest.LogCaptureFixture, transition: str) -> list[logging.LogRecord]:
    return [
        rec
        for rec in caplog.records
        if rec.name == "delayqueue.jobs" and getattr(rec, "transition", None) == transition
    ]


def cli(*args: str) -> str:
    out = StringIO()
    call_command("delayqueue", *args, stdout=out)
    return out.getvalue()


def test_admin_force_back_sends_job_forced_back_and_logs_it(
    r: redis.Redis, admin: Any, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    job = make_inflight("f")
    waiting = schedule("w")
    with caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        post(admin, "force_back", job.id, confirmed="yes")
        post(admin, "force_back", waiting.id, confirmed="yes")  # not in flight: no event
    reason = "forced back to scheduled by op in the admin"
    assert recorder.of("forced_back") == [{"queue": Q, "job_id": job.id, "reason": reason}]
    assert recorder.senders("forced_back") == {signals.SENDER_ADMIN}
    [line] = lines(caplog, "forced_back")
    assert line.levelno == logging.WARNING
    assert (line.job_id, line.queue, line.reason) == (job.id, Q, reason)  # type: ignore[attr-defined]
    assert f"in-flight job {job.id} on {Q} forced back to scheduled" in line.getMessage()


def test_admin_delete_and_purge_all_send_dead_purged_with_the_count(
    r: redis.Redis, admin: Any, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    first, second, third = make_dead("d1"), make_dead("d2"), make_dead("d3")
    with caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        post(admin, "delete", first.id, confirmed="yes")
        post(admin, "delete", first.id, confirmed="yes")  # gone already: nothing deleted
        post(admin, "purge_all", confirmed="yes")
    assert recorder.of("purged") == [
        {"queue": Q, "count": 1, "job_ids": [first.id]},
        {"queue": Q, "count": 2, "job_ids": None},
    ]
    assert recorder.senders("purged") == {signals.SENDER_ADMIN}
    assert not any(r.exists(queue_keys(Q).job(j.id)) for j in (first, second, third))
    deleted = lines(caplog, "purged")
    assert [(rec.count, rec.levelno) for rec in deleted] == [  # type: ignore[attr-defined]
        (1, logging.WARNING),
        (2, logging.WARNING),
    ]
    assert deleted[1].getMessage() == f"2 dead jobs deleted on {Q}"


def test_admin_pause_and_resume_send_queue_paused_and_queue_resumed(
    r: redis.Redis, admin: Any, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    schedule("x")
    with caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        post(admin, "pause")
        post(admin, "pause")  # paused already: no second event
        post(admin, "resume")
        post(admin, "resume")  # not paused: none either
    assert recorder.of("paused") == [{"queue": Q, "note": "paused by op in the admin"}]
    assert recorder.of("resumed") == [{"queue": Q}]
    assert recorder.senders("paused") == recorder.senders("resumed") == {signals.SENDER_ADMIN}
    [paused], [resumed] = lines(caplog, "paused"), lines(caplog, "resumed")
    assert paused.note == "paused by op in the admin"  # type: ignore[attr-defined]
    assert paused.getMessage() == f"queue {Q} paused: paused by op in the admin"
    assert resumed.getMessage() == f"queue {Q} resumed" and resumed.job_id is None  # type: ignore[attr-defined]


def test_the_command_line_reports_pause_resume_and_purges(
    r: redis.Redis, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = make_dead("d1"), make_dead("d2")
    with caplog.at_level(logging.INFO, logger="delayqueue.jobs"):
        cli("pause", Q, "--note", "deploy", "--yes")
        cli("resume", Q, "--yes")
        cli("purge-dead", Q, first.id, "--yes")
        cli("purge-dead", Q, "--yes")
    assert recorder.of("paused") == [{"queue": Q, "note": "deploy"}]
    assert recorder.of("resumed") == [{"queue": Q}]
    assert recorder.of("purged") == [
        {"queue": Q, "count": 1, "job_ids": [first.id]},
        {"queue": Q, "count": 1, "job_ids": None},
    ]
    assert not r.exists(queue_keys(Q).job(second.id))
    assert {rec.transition for rec in caplog.records if rec.name == "delayqueue.jobs"} >= {  # type: ignore[attr-defined]
        "paused",
        "resumed",
        "purged",
    }


def test_a_write_no_one_listens_to_is_the_engines_call_as_it_is(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No receiver and INFO off: the enqueue call is not wrapped (delay_for builds nothing
    for its event), nor the ack's report; with a receiver it is, and the event comes with
    the reply."""
    for signal in (signals.job_scheduled, signals.job_succeeded):  # (metrics may listen)
        monkeypatch.setattr(signal, "receivers", [])
    keys = queue_keys(Q)
    new = [transitions.NewJob(new_job_id(), "delay", 1000, "", "keep", "", "")]
    bare = transitions.enqueue(keys, new, wake_horizon_ms=0).parse
    one = [spec(jobs.record, ("a",), delay=5, queue=Q)]
    with caplog.at_level(logging.WARNING, logger="delayqueue.jobs"):
        assert writes.enqueue_call(one).parse is bare
        with recording() as recorder:
            call = writes.enqueue_call(one)
            assert call.parse is not bare
            writes.write(one)
        assert writes.enqueue_call(one).parse is bare
    [sent] = recorder.of("scheduled")
    assert sent["job_id"] == one[0].job.id and sent["task"] == "tests.support.jobs.record"
    with caplog.at_level(logging.WARNING, logger="delayqueue.jobs"):
        settling = reported.ack(keys, "id", "1", task="t", attempt=1, runtime=0.0)
        assert settling.report is reported._nothing
