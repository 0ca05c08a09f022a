"""Baselines measured with plain redis-py and plain Celery on the benchmark's Redis: what the
delayqueue figures are read against."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import redis

from bench.env import RAW_DB, BenchEnv

# The least a scheduled job needs: its data and its place in time, in one script call.
RAW_ENQUEUE = """
redis.call('HSET', KEYS[1], 'task', ARGV[1], 'args', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return 1
"""
# The least a claim needs: take due members off one zset and put them on another.
RAW_MOVE = """
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #ids == 0 then return 0 end
redis.call('ZREM', KEYS[1], unpack(ids))
local pairs = {}
for _, id in ipairs(ids) do pairs[#pairs + 1] = ARGV[1]; pairs[#pairs + 1] = id end
redis.call('ZADD', KEYS[2], unpack(pairs))
return #ids
"""


def raw_client(env: BenchEnv) -> redis.Redis:
    return env.client(RAW_DB)


def evalsha_rate(env: BenchEnv, n: int, prefill: int = 0, flush: bool = True) -> float:
    """Jobs/s of one EVALSHA round trip per job (HSET + ZADD), redis-py, one process, with
    ``prefill`` members already in the zset."""
    write = raw_enqueuer(env, prefill, flush)
    started = time.perf_counter()
    for i in range(n):
        write(i)
    return n / (time.perf_counter() - started)


def raw_enqueuer(env: BenchEnv, prefill: int = 0, flush: bool = True) -> Callable[[int], None]:
    """Job ``i`` written by one EVALSHA round trip (HSET + ZADD) with redis-py's client, the
    script loaded and the connection open."""
    client = raw_client(env)
    if flush:
        client.flushdb()
    script = client.register_script(RAW_ENQUEUE)
    if prefill:
        fill_zset(client, "raw:scheduled", prefill)
    script(["raw:job:warm", "raw:scheduled"], ["t", "[0]", 1, "warm"])
    now = int(time.time() * 1000)

    def write(i: int) -> None:
        script(
            [f"raw:job:{i:026d}", "raw:scheduled"],
            ["bench.tasks.noop", f"[{i}]", now + 3_600_000 + i, f"{i:026d}"],
        )

    return write


def fill_zset(client: redis.Redis, key: str, count: int) -> None:
    now = int(time.time() * 1000)
    for start in range(0, count, 10_000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + 10_000)):
            pipe.zadd(key, {f"fill{i:022d}": now + 7_200_000 + i})
        pipe.execute()


def zadd_pipeline_rate(env: BenchEnv, n: int) -> float:
    """Jobs/s of pipelines of 1,000 ZADDs (no job data at all)."""
    client = raw_client(env)
    client.flushdb()
    now = int(time.time() * 1000)
    started = time.perf_counter()
    for start in range(0, n, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + 1000)):
            pipe.zadd("raw:zset", {f"{i:026d}": now + i})
        pipe.execute()
    return n / (time.perf_counter() - started)


def move_rate(env: BenchEnv, n: int, batch: int) -> float:
    """Jobs/s of a minimal claim: due ids moved between two zsets by a script, ``batch`` at a
    time (no job hashes, no tokens)."""
    client = raw_client(env)
    client.flushdb()
    script = client.register_script(RAW_MOVE)
    past = int(time.time() * 1000) - 1000
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        pipe.zadd("raw:due", {f"{i:026d}": past})
    pipe.execute()
    now = int(time.time() * 1000)
    started = time.perf_counter()
    while int(script(["raw:due", "raw:inflight"], [now, batch])):
        pass
    return n / (time.perf_counter() - started)


def celery_countdown_rate(n: int) -> float:
    """Jobs/s of ``apply_async(countdown=...)`` to a queue no worker consumes."""
    from bench.tasks import noop

    noop.apply_async(args=(0,), countdown=3600, queue="bench-idle")
    started = time.perf_counter()
    for i in range(n):
        noop.apply_async(args=(i,), countdown=3600, queue="bench-idle")
    return n / (time.perf_counter() - started)


def eta_at(ms: float) -> datetime:
    """The aware datetime of an epoch millisecond (half a millisecond in, so that flooring
    it back to milliseconds gives ``ms``)."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=int(ms) + 0.5)
