"""The admin's operator actions (delayqueue.services.operations) and read-only queries
(delayqueue.services.browse, dashboard, job_detail), on the suite's real Redis."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from delayqueue.engine.keys import current_minute, global_keys, queue_keys
from delayqueue.errors import InvalidDelay, InvalidJobId
from delayqueue.services import browse, dashboard, display, operations
from delayqueue.services.job_detail import job_detail
from tests.support import jobs
from tests.support.states import Q, claim_all, make_dead, make_inflight, redis_ms, schedule, score
from tests.support.waiting import wait_for


def keys() -> Any:
    return queue_keys(Q)


# ---- scheduled --------------------------------------------------------------------------


def test_run_now_makes_a_scheduled_job_due_now_and_reports_one_that_moved_on(r):
    job, gone = schedule("a"), schedule("b")
    operations.cancel(Q, [gone.id])
    before = redis_ms(r)
    result = operations.run_now(Q, [job.id, gone.id])
    assert result.done == [job.id]
    assert result.missed == [gone.id]
    due = score(r, keys().scheduled, job.id)
    assert due is not None and before <= due <= redis_ms(r)


def test_reschedule_moves_the_due_time_and_rejects_bad_delays(r):
    job = schedule("a", seconds=10)
    before = redis_ms(r)
    assert operations.reschedule(Q, [job.id], 3_600_000).done == [job.id]
    due = score(r, keys().scheduled, job.id)
    assert due is not None and before + 3_600_000 <= due <= redis_ms(r) + 3_600_000
    for bad in (-1, 10**15, 1.5, True):
        with pytest.raises(InvalidDelay):
            operations.reschedule(Q, [job.id], bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobId):
        operations.reschedule(Q, ["not-an-id"], 0)


def test_cancel_deletes_the_job_and_frees_its_dedupe_key(r):
    job = schedule("a", key="order:1")
    result = operations.cancel(Q, [job.id])
    assert result.done == [job.id]
    assert not r.exists(keys().job(job.id))
    assert r.hget(keys().dedupe, "order:1") is None
    assert operations.cancel(Q, [job.id]).missed == [job.id]


def test_actions_on_scheduled_jobs_miss_jobs_in_other_states(r):
    flying, dead = make_inflight("f"), make_dead("d")
    assert operations.run_now(Q, [flying.id, dead.id]).missed == [flying.id, dead.id]
    assert operations.cancel(Q, [flying.id, dead.id]).missed == [flying.id, dead.id]
    assert score(r, keys().inflight, flying.id) is not None
    assert score(r, keys().dead, dead.id) is not None


# ---- in flight --------------------------------------------------------------------------


def test_force_back_returns_an_inflight_job_to_scheduled_due_now_with_a_history_entry(r):
    job = make_inflight("f")
    waiting = schedule("w")
    result = operations.force_back(Q, [job.id, waiting.id], "forced back by alice")
    assert result.done == [job.id] and result.missed == [waiting.id]
    assert score(r, keys().inflight, job.id) is None
    due = score(r, keys().scheduled, job.id)
    assert due is not None and due <= redis_ms(r)
    history = json.loads(r.hget(keys().job(job.id), "hist") or "[]")
    assert history[-1]["outcome"] == "released"
    assert history[-1]["detail"] == "forced back by alice"
    assert r.hget(keys().job(job.id), "att") == "1"  # the attempt counts


# ---- dead -------------------------------------------------------------------------------


def test_retry_dead_requeues_with_fresh_attempts_and_sorts_out_the_rest(r):
    dead, alive = make_dead("d", key="k:d"), schedule("s")
    broken = make_dead("x")
    r.hdel(keys().job(broken.id), "task")  # its data can no longer run
    result = operations.retry_dead(Q, [dead.id, alive.id, broken.id])
    assert result.done == [dead.id]
    assert result.missed == [alive.id]
    assert result.unrunnable == [broken.id]
    assert score(r, keys().scheduled, dead.id) is not None
    assert r.hget(keys().job(dead.id), "att") == "0"
    assert r.hget(keys().dedupe, "k:d") == dead.id
    assert score(r, keys().dead, broken.id) is not None


def test_delete_dead_removes_dead_jobs_only(r):
    dead, alive = make_dead("d"), schedule("s")
    result = operations.delete_dead(Q, [dead.id, alive.id])
    assert result.done == [dead.id] and result.missed == [alive.id]
    assert not r.exists(keys().job(dead.id))
    assert score(r, keys().scheduled, alive.id) is not None


def test_retry_all_and_purge_all_work_in_chunks_and_leave_unrunnable_jobs(r):
    dead = [make_dead(f"d{i}") for i in range(7)]
    r.hdel(keys().job(dead[0].id), "args")  # the oldest cannot run
    result = operations.retry_all_dead(Q, chunk=3)
    assert (result.done, result.unrunnable) == (6, 1)
    assert r.zrange(keys().dead, 0, -1) == [dead[0].id]
    assert r.zcard(keys().scheduled) == 6
    more = [make_dead(f"e{i}") for i in range(4)]
    assert operations.purge_all_dead(Q, chunk=2).done == 5
    assert r.zcard(keys().dead) == 0
    assert not any(r.exists(keys().job(j.id)) for j in [dead[0], *more])


# ---- pause ------------------------------------------------------------------------------


def test_a_paused_queue_is_not_claimed_and_resume_wakes_the_workers(r):
    job = schedule("p", seconds=0)
    assert operations.pause(Q, "paused by alice") is True
    assert operations.pause(Q, "again") is False
    assert operations.is_paused(Q)
    assert claim_all() == []
    listener = r.pubsub()
    listener.subscribe(keys().wake)
    # the server's confirmation first: a publish before the SUBSCRIBE would reach nobody
    assert listener.get_message(timeout=5)["type"] == "subscribe"
    assert operations.resume(Q) is True
    message = listener.get_message(timeout=5)
    listener.close()
    assert message is not None and message["data"] == "resumed"
    assert operations.resume(Q) is False
    assert [c.id.decode() for c in claim_all()] == [job.id]


# ---- browse -----------------------------------------------------------------------------


def test_job_page_pages_by_rank_in_both_orders(r):
    made = [schedule(f"j{i}", seconds=100 + i) for i in range(120)]
    first = browse.job_page(Q, "scheduled", page=1)
    assert (first.total, first.pages, len(first.rows)) == (120, 3, 50)
    assert [row.id for row in first.rows] == [j.id for j in made[:50]]
    last = browse.job_page(Q, "scheduled", page=3)
    assert [row.id for row in last.rows] == [j.id for j in made[100:]]
    newest = browse.job_page(Q, "scheduled", page=1, order="desc")
    assert newest.rows[0].id == made[-1].id
    assert newest.rows[0].task == "tests.support.jobs.record"
    assert newest.rows[0].args_preview == '["j119"]'
    with pytest.raises(browse.PageOutOfRange):
        browse.job_page(Q, "scheduled", page=4)


def test_job_page_search_by_id_key_and_bounded_text_scan(r, monkeypatch):
    keyed = schedule("k", key="close-order:42")
    plain = schedule("p", task=jobs.plain)
    by_id = browse.job_page(Q, "scheduled", search=keyed.id.lower())
    assert by_id.search_mode == "id" and [row.id for row in by_id.rows] == [keyed.id]
    by_key = browse.job_page(Q, "scheduled", search="close-order:42")
    assert by_key.search_mode == "key" and [row.id for row in by_key.rows] == [keyed.id]
    by_text = browse.job_page(Q, "scheduled", search="PLAIN")
    assert by_text.search_mode == "scan" and [row.id for row in by_text.rows] == [plain.id]
    by_task = browse.job_page(Q, "scheduled", task="tests.support.jobs.record")
    assert [row.id for row in by_task.rows] == [keyed.id]
    elsewhere = browse.job_page(Q, "dead", search=keyed.id)
    assert elsewhere.rows == [] and elsewhere.elsewhere == "scheduled"

    for i in range(30):
        schedule(f"bulk{i}", seconds=1000 + i)
    monkeypatch.setattr(browse, "SEARCH_WINDOW", 20)
    monkeypatch.setattr(browse, "SCAN_CHUNK", 7)
    bounded = browse.job_page(Q, "scheduled", search="record")
    assert bounded.bounded and bounded.scanned == 20
    assert bounded.matched == 19  # 20 looked at, one of them is the plain task


def test_overview_counts_heads_and_throughput(r):
    wait_for(lambda: time.time() % 60 < 57, timeout=5)  # all of it within one stats minute
    make_inflight("f1")
    make_inflight("f2")
    make_dead("d")  # 3 dispatched, 1 failed, 1 dead so far in this minute
    soon = schedule("soon", seconds=60)
    minute = current_minute()
    stats = keys().stats
    r.hincrby(stats(minute), "acked", 4)
    r.hincrby(stats(minute - 30), "dispatched", 100)
    r.hincrby(stats(minute - 90), "dispatched", 1000)  # outside the hour
    r.sadd(global_keys().queues, Q)
    now, (row,) = dashboard.overview([Q])
    assert (row.scheduled, row.inflight, row.dead, row.paused) == (1, 2, 1, False)
    assert row.next_due is not None and row.next_due.ms == score(r, keys().scheduled, soon.id)
    assert row.oldest_overdue is None
    assert row.next_deadline is not None and row.next_deadline.ms > now
    assert (row.last_minute.dispatched, row.last_minute.acked, row.last_minute.failed) == (3, 4, 1)
    assert (row.last_hour.dispatched, row.last_hour.acked, row.last_hour.dead) == (103, 4, 1)

    operations.pause(Q, "test")
    late = schedule("late", seconds=0)
    _, (row,) = dashboard.overview([Q])
    assert row.paused
    assert row.oldest_overdue is not None
    assert row.oldest_overdue.ms == score(r, keys().scheduled, late.id)


def test_due_chart_counts_jobs_per_bucket(r):
    r.sadd(global_keys().queues, Q)
    for i in range(3):
        schedule(f"m{i}", seconds=90)  # minute bucket 1
    schedule("h", seconds=3 * 3600 + 10)  # hour bucket 3
    chart = dashboard.due_chart([Q])
    assert [b.count for b in chart.minutes][:3] == [0, 3, 0]
    assert sum(b.count for b in chart.minutes) == 3
    assert chart.hours[0].count == 3 and chart.hours[3].count == 1
    assert len(chart.minutes) == 60 and len(chart.hours) == 24


def test_job_detail_reads_everything_and_survives_corrupt_data(r):
    job = make_dead("d", error="KeyError: 'x'")
    detail = job_detail(Q, job.id)
    assert detail is not None and detail.state == "dead"
    assert detail.task == "tests.support.jobs.record" and detail.args == '[\n  "d"\n]'
    assert detail.error == "KeyError: 'x'" and "Traceback" in detail.traceback
    assert detail.history[-1].outcome == "failed" and detail.token == "1"
    r.hset(keys().job(job.id), mapping={"args": "{not json", "hist": "[oops"})
    broken = job_detail(Q, job.id)
    assert broken is not None and not broken.args_valid and not broken.history_valid
    assert job_detail(Q, "01ARZ3NDEKTSV4RRFFQ69G5FAV") is None


def test_relative_text():
    assert display.relative_text(180_000) == "in 3 min"
    assert display.relative_text(-45_000) == "45 s ago"
    assert display.relative_text(300) == "now"
    assert display.relative_text(2 * 3600_000 + 5 * 60_000) == "in 2 h 5 min"
    assert display.relative_text(-3 * 86400_000) == "3 days ago"
