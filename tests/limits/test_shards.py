"""A limit on a sharded queue: one limit's jobs and state are on one shard (one slot), so
the limit spans the queue; other limit keys spread over the shards."""

from __future__ import annotations

import redis

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.shards import shard_names
from tests.support import limit_tasks


def test_one_limit_is_on_one_shard_and_holds_across_the_queue(r: redis.Redis) -> None:
    jobs = [limit_tasks.sharded.delay_for(f"s{i}", seconds=0, on_commit=False) for i in range(9)]
    assert len({job.queue for job in jobs}) == 1  # by its limit's name, not its id
    claimed = sum(
        len(run(transitions.claim(queue_keys(shard), limit=100, visibility_ms=30_000)).jobs)
        for shard in shard_names("limits_sharded")
    )
    assert claimed == 3


def test_limit_keys_spread_over_shards_and_a_dedupe_key_is_found_on_any(
    r: redis.Redis,
) -> None:
    keys = [f"provider:{i}" for i in range(12)]
    jobs = [
        limit_tasks.sharded.delay_for(key, seconds=60, limit_key=key, key=f"d-{key}",
                                      on_commit=False)
        for key in keys
    ]  # fmt: skip
    assert len({job.queue for job in jobs}) > 1
    assert all(limit_tasks.sharded.cancel(key=f"d-{key}") for key in keys)
    assert all(r.zcard(queue_keys(shard).scheduled) == 0 for shard in shard_names("limits_sharded"))
