"""The hand-off watch (worker/handoff.py) and what it reads (engine/presence.py), on a real
Redis: a watched dispatch not begun while nothing waits on the broker falls back and its jobs
come back at once; nothing falls back while a Celery side that runs both forms is known, or
while messages wait; a dispatch that began is never sent again; whatever the two hashes hold,
reading them never fails."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import redis
from celery import Celery

import delayqueue
from delayqueue.engine import presence, transitions
from delayqueue.engine.clients import get_raw_redis
from delayqueue.engine.execution import run
from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.worker import handoff
from delayqueue.worker.handoff import HandoffWatch
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.recording import recording

Q = queue_keys("tests")
TASK = jobs.record.name


@pytest.fixture(autouse=True)
def at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A watched message is due for a look at once (not 10 s after its publish)."""
    monkeypatch.setattr(handoff, "START_CHECK_SECONDS", 0.0)


def claimed(count: int = 2) -> list[tuple[str, str]]:
    jobs.record.delay_many([(f"t{i}",) for i in range(count)], seconds=0, on_commit=False)
    got = run(transitions.claim(Q, limit=count, visibility_ms=60_000)).jobs
    return [(job.id.decode(), str(int(job.token))) for job in got]


def watched(form: str = handoff.RUN_BATCH) -> tuple[HandoffWatch, list[tuple[str, str]]]:
    watch = HandoffWatch("test-worker")
    watch.current()
    sent = claimed()
    watch.sent(form, TASK, "tests", sent)
    return watch, sent


def test_a_batch_taken_and_not_begun_falls_back_and_its_jobs_come_back(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    watch, sent = watched()
    with caplog.at_level(logging.WARNING, "delayqueue.worker"), recording() as recorder:
        watch.check(lambda: 0)
        watch.check(lambda: 0)
        watch.current()
    released = recorder.of("released")  # each job's give-back reports itself
    assert sorted(event["job_id"] for event in released) == sorted(j for j, _ in sent)
    assert all(event["reason"].startswith("sent again: ") for event in released)
    fallback = watch.handoff.fallbacks[TASK]
    assert fallback.form == "single" and "run_batch" in fallback.reason
    assert not watch.handoff.may_batch(TASK) and watch.handoff.may_run_task(TASK)
    for job_id, _ in sent:
        assert r.zscore(Q.scheduled, job_id) is not None  # back, due now
        assert r.zscore(Q.inflight, job_id) is None
        assert r.hget(Q.job(job_id), "att") == "0"  # the attempt given back
    said = [m for m in caplog.messages if m.startswith(f"jobs of {TASK} are handed")]
    assert len(said) == 1, caplog.messages


def test_a_plain_tasks_run_task_falls_back_to_the_task_itself(r: redis.Redis) -> None:
    watch, _ = watched(handoff.RUN_TASK)
    watch.check(lambda: 0)
    assert watch.handoff.fallbacks[TASK].form == "plain"
    assert not watch.handoff.may_run_task(TASK) and not watch.handoff.may_batch(TASK)


def test_nothing_falls_back_while_messages_wait_on_the_broker_or_it_cannot_say(
    r: redis.Redis,
) -> None:
    watch, sent = watched()
    watch.check(lambda: 3)  # behind a backlog: not discarded
    watch.check(lambda: None)  # the broker cannot say: wait BLIND_CHECK_SECONDS
    assert TASK not in presence.read_handoff().fallbacks
    assert all(r.zscore(Q.inflight, job_id) is not None for job_id, _ in sent)


def test_nothing_falls_back_while_a_celery_side_that_runs_both_forms_is_known(
    r: redis.Redis,
) -> None:
    presence.announce("celery@busy", 1234)
    watch, sent = watched()
    watch.check(lambda: 0)  # prefetched behind long tasks, not discarded
    assert TASK not in presence.read_handoff().fallbacks
    assert all(r.zscore(Q.inflight, job_id) is not None for job_id, _ in sent)


def test_a_side_on_another_broker_or_queue_does_not_vouch_for_these_messages(
    r: redis.Redis,
) -> None:
    presence.announce("celery@other-broker", 1, "redis://:**@elsewhere:6379/1", ["celery"])
    presence.announce("celery@other-queue", 2, "redis://:**@here:6379/1", ["reports"])
    watch = HandoffWatch("test-worker", broker="redis://:**@here:6379/1")
    watch.current()
    sent = claimed()
    watch.sent(handoff.RUN_BATCH, TASK, "tests", sent, celery_queue="celery")
    watch.check(lambda: 0)
    assert presence.read_handoff().fallbacks[TASK].form == "single"
    assert presence.read_handoff().celery_side_known("redis://:**@here:6379/1", "reports")


def test_a_side_of_another_protocol_stops_batches_only_while_it_runs(r: redis.Redis) -> None:
    raw = json.dumps({"protocol": presence.WIRE_PROTOCOL + 1, "pid": 1, "at": presence._now_ms()})
    r.hset(global_keys().celery_sides, "celery@newer", raw)
    assert not presence.read_handoff().may_batch(TASK)
    stale = json.dumps({"protocol": 99, "pid": 1, "at": presence._now_ms() - 3_600_000})
    r.hset(global_keys().celery_sides, "celery@newer", stale)
    assert presence.read_handoff().may_batch(TASK)


def test_a_dispatch_that_began_is_never_sent_again(r: redis.Redis) -> None:
    watch, sent = watched()
    first_id, first_token = sent[0]
    assert run(transitions.begin(Q, first_id, first_token, visibility_ms=60_000)).run
    watch2 = HandoffWatch("other")
    watch2.sent(handoff.RUN_BATCH, TASK, "tests", [(first_id, first_token), sent[1]])
    # the oldest message's first job began: the form runs there; nothing is released
    watch2.check(lambda: 0)
    assert r.zscore(Q.inflight, first_id) is not None
    released = run(
        transitions.release(
            Q, first_id, token=first_token, delay_ms=0, give_back=True, reason="r",
            unless_begun=True,
        )
    )  # fmt: skip
    assert released is False and r.zscore(Q.inflight, first_id) is not None


def test_whatever_the_hashes_hold_reading_them_never_fails(r: redis.Redis) -> None:
    g = global_keys()
    raw = get_raw_redis()
    raw.hset(g.celery_sides, b"\xff\xfe", b"{}")
    raw.hset(g.celery_sides, "celery@x", b"not json \xff")
    raw.hset(g.celery_sides, "celery@y", json.dumps({"protocol": "1", "at": None}))
    raw.hset(g.celery_sides, "celery@z", json.dumps([1, 2]))
    raw.hset(g.fallbacks, TASK, json.dumps({"form": "everything", "reason": 1}))
    raw.hset(g.fallbacks, "other", b"\xff")
    read = presence.read_handoff()
    assert read.sides == [] and read.fallbacks == {}
    r.delete(g.celery_sides, g.fallbacks)
    r.set(g.celery_sides, "a string")
    r.set(g.fallbacks, "a string")
    read = presence.read_handoff()
    assert read.sides == [] and read.fallbacks == {}
    assert read.may_batch(TASK) and read.may_run_task(TASK)


@pytest.mark.django_db
def test_the_admin_and_health_say_why_a_task_falls_back(
    r: redis.Redis, django_user_model: Any
) -> None:
    from django.test import Client
    from django.urls import reverse

    from tests.support.command_line import cli

    presence.fall_back(TASK, "single", "a run_batch message was discarded (test)", "w-1")
    presence.announce("celery@shop-1", 4321)
    user = django_user_model.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(user)
    page = client.get(reverse("admin:delayqueue_delayedjob_changelist"))
    assert page.status_code == 200
    shown = page.content.decode()
    assert f"jobs of {TASK} are handed to Celery one to a message" in shown
    assert "a run_batch message was discarded (test)" in shown
    assert "celery@shop-1" in shown

    health = cli("health", "--json")
    remarks = json.loads(health.stdout)["remarks"]
    assert any("a run_batch message was discarded (test)" in remark for remark in remarks)
    assert any("celery@shop-1" in remark for remark in remarks)
    text = cli("health").stdout
    assert f"note: jobs of {TASK} are handed to Celery one to a message" in text


def test_a_plain_task_sent_as_itself_is_acked_at_its_publish_and_says_so(
    r: redis.Redis, parked_celery: Celery, caplog: pytest.LogCaptureFixture
) -> None:
    """A Celery worker without delayqueue's side runs it: the ack at publish is one call
    that reports itself (the "handed_over" line)."""
    presence.fall_back(jobs.plain.name, "plain", "no delayqueue side there", "test")
    made = delayqueue.enqueue(jobs.plain.name, ["x"], delay=0, queue="tests", on_commit=False)
    with caplog.at_level(logging.DEBUG, "delayqueue.jobs"):
        DelayWorker(["tests"], celery_app=parked_celery).run_pass()
    assert r.zscore(Q.inflight, made.id) is None and not r.exists(Q.job(made.id))
    [line] = [rec for rec in caplog.records if getattr(rec, "transition", "") == "handed_over"]
    assert line.getMessage().startswith(f"job {made.id} on tests acked as it was published")
