"""Sharded queues (engine/shards.py): a queue of N shards is N queues "name~i"; a job goes to
the shard its key (else its id) hashes to; by key, cancel and reschedule are one call on one
shard; a worker given the queue claims from every shard, one given a shard from that one; the
admin shows one row per queue with its shards behind it."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from celery import Celery
from django.core.checks import run_checks
from django.test import Client, override_settings

import delayqueue
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.shards import shard_for, shard_names
from delayqueue.errors import InvalidOption, InvalidQueueName
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.data_redis import command_calls

SHARDS = [f"sharded~{i}" for i in range(4)]


def keyed(count: int, *, delay: float) -> list[delayqueue.Job]:
    """``count`` jobs with dedupe keys k0, k1...: where each lands is fixed by its key (ids are
    random, keys are not), so a test's spread over the shards is the same on every run."""
    specs = [delayqueue.spec(jobs.sharded, (i,), delay=delay, key=f"k{i}") for i in range(count)]
    return delayqueue.delay_many(specs, on_commit=False)


def scheduled(r: redis.Redis, queue: str) -> set[str]:
    return {str(member) for member in r.zrange(queue_keys(queue).scheduled, 0, -1)}


def _script_calls(r: redis.Redis) -> int:
    return command_calls(r, "evalsha")


def test_jobs_spread_over_the_shards_and_each_says_its_shard(r: redis.Redis) -> None:
    assert shard_names("sharded") == SHARDS
    # by id: random ids, so 400 jobs, where a shard with under 25 would be a broken hash
    # (each expects 100: less than 25 has odds far below one in a trillion)
    made = jobs.sharded.delay_many([(i,) for i in range(400)], seconds=60, on_commit=False)
    one = jobs.sharded.delay_for("one", seconds=60, on_commit=False)
    for job in [*made, one]:
        assert job.queue == shard_for("sharded", job.id)
        assert job.id in scheduled(r, job.queue)
    assert all(len(scheduled(r, shard)) >= 25 for shard in SHARDS)
    assert sum(len(scheduled(r, shard)) for shard in SHARDS) == 401
    assert r.zcard(queue_keys("sharded").scheduled) == 0  # nothing on the unsharded name


def test_by_key_a_job_lives_on_its_keys_shard_and_one_call_finds_it(r: redis.Redis) -> None:
    keys = [f"order:{i}" for i in range(12)]
    made = {key: jobs.sharded.delay_for(key, seconds=60, key=key, on_commit=False) for key in keys}
    assert {job.queue for job in made.values()} == {shard_for("sharded", k) for k in keys}
    for key, job in made.items():
        assert job.queue == shard_for("sharded", key)
    # scheduling again with the key keeps the one job: the same shard is asked
    again = jobs.sharded.delay_for("again", seconds=60, key="order:3", on_commit=False)
    assert again.id == made["order:3"].id and again.outcome == "kept"

    jobs.sharded.reschedule(key="order:0", seconds=5)  # each script loaded before counting
    jobs.sharded.cancel(key="order:0")
    before = _script_calls(r)
    moved = jobs.sharded.reschedule(key="order:5", seconds=5)
    assert moved is not None and moved.queue == made["order:5"].queue
    assert jobs.sharded.cancel(key="order:7") is True
    assert _script_calls(r) == before + 2  # one script call each, on one shard
    assert made["order:7"].id not in scheduled(r, made["order:7"].queue)


def test_by_id_the_queue_name_asks_every_shard_and_the_shard_name_asks_one(
    r: redis.Redis,
) -> None:
    job = jobs.sharded.delay_for("x", seconds=60, on_commit=False)
    other = jobs.sharded.delay_for("y", seconds=60, on_commit=False)
    assert delayqueue.cancel("sharded", job.id) is True  # found on whichever shard
    assert delayqueue.cancel("sharded", job.id) is False
    assert delayqueue.reschedule(other.queue, other.id, delay=1) is not None
    assert other.id in scheduled(r, other.queue)
    with pytest.raises(InvalidQueueName):
        delayqueue.cancel("sharded~x", other.id)


def test_a_worker_on_the_queue_claims_every_shard_and_a_pinned_one_its_own(
    r: redis.Redis, parked_celery: Celery
) -> None:
    made = keyed(40, delay=0)
    by_shard = {shard: {j.id for j in made if j.queue == shard} for shard in SHARDS}
    pinned = DelayWorker(["sharded~2"], celery_app=parked_celery)
    assert pinned.queues == ["sharded~2"]
    assert {job.id for job in pinned.run_pass().claimed} == by_shard["sharded~2"]

    everyone = DelayWorker(["sharded"], claim_size=3, celery_app=parked_celery)
    assert everyone.queues == SHARDS
    first = everyone.run_pass().claimed  # every shard gets its claim in one pass
    assert {job.queue for job in first} == {"sharded~0", "sharded~1", "sharded~3"}
    assert len(first) == 9


def test_the_dashboard_shows_one_row_per_queue_with_its_shards_behind_it(
    r: redis.Redis, django_user_model: Any
) -> None:
    assert {job.queue for job in keyed(20, delay=60)} == set(SHARDS)
    jobs.record.delay_for("plain", seconds=60, on_commit=False)
    user = django_user_model.objects.create_user("admin", password="pw", is_staff=True)
    user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    page = client.get("/admin/delayqueue/delayedjob/").content.decode()
    assert page.count('data-queue="sharded"') == 1 and 'class="sharded"' in page
    assert "4 shards" in page
    for shard in SHARDS:
        assert f'data-shard="{shard}"' in page
        assert f'data-queue="{shard}"' not in page  # behind its queue, not a row of its own
    assert 'data-queue="tests"' in page
    assert client.get(f"/admin/delayqueue/delayedjob/{SHARDS[1]}/scheduled/").status_code == 200


def test_the_shards_setting_and_what_tasks_declare(r: redis.Redis, settings: Any) -> None:
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "SHARDS": {"wide": 3}}
    job = delayqueue.enqueue(jobs.record, ("w",), queue="wide", delay=60, on_commit=False)
    assert job.queue in {"wide~0", "wide~1", "wide~2"}

    def other() -> None: ...

    with pytest.raises(InvalidOption, match="declared with 4 shards"):
        delayqueue.delayed_task(queue="sharded", shards=2, name="tests.other")(other)
    with pytest.raises(InvalidOption, match="shards must be an integer"):
        delayqueue.delayed_task(queue="x", shards=0)(other)
    with override_settings(DELAYQUEUE={"REDIS_URL": "redis://x", "SHARDS": {"a": 0}}):
        assert "delayqueue.E004" in {m.id for m in run_checks()}
    with override_settings(DELAYQUEUE={"REDIS_URL": "redis://x", "SHARDS": ["a"]}):
        assert "delayqueue.E004" in {m.id for m in run_checks()}
