"""Baselines measured with plain redis-py and plain Celery on the benchmark's Redis: what the
delayqueue figures are read against."""

from __future__ import annotations

import pickle
import sys
import time
import types
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

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


def zadd_pipeline_rate(env: BenchEnv, n: int, flush: bool = True) -> float:
    """Jobs/s of pipelines of 1,000 ZADDs (no job data at all); ``flush=False`` adds to
    the members already there (new ones: their names go on from the zset's size)."""
    client = raw_client(env)
    if flush:
        client.flushdb()
    now = int(time.time() * 1000)
    base = client.zcard("raw:zset")
    started = time.perf_counter()
    for start in range(base, base + n, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(base + n, start + 1000)):
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


class HueyMessage(NamedTuple):
    """The fields of huey's ``huey.registry.Message`` (huey 3.x), in its order: what huey
    pickles for each task it stores."""

    id: str
    name: str
    eta: datetime | None
    retries: int
    retry_delay: int
    priority: int | None
    args: tuple[object, ...]
    kwargs: dict[str, object]
    on_complete: object = None
    on_error: object = None
    expires: object = None
    expires_resolved: object = None
    timeout: object = None
    chord_config: object = None
    retry_backoff: int = 0


def huey_messages(task: str, calls: list[tuple[tuple[object, ...], datetime]]) -> list[bytes]:
    """The bytes huey stores for each ``task(*args)`` scheduled at ``eta`` of ``calls``: its
    default serializer's ``pickle.dumps(message, HIGHEST_PROTOCOL)`` of a
    ``huey.registry.Message`` with a uuid4 id, the task's defaults (retries 0, retry_delay
    0, no priority, ...), the args tuple and empty kwargs. Only pickled (never unpickled);
    huey itself need not be installed: the class is pickled under huey's module path, as
    huey's own is."""
    saved = {name: sys.modules.get(name) for name in ("huey", "huey.registry")}
    module = types.ModuleType("huey.registry")
    module.Message = HueyMessage  # type: ignore[attr-defined]
    HueyMessage.__module__, HueyMessage.__qualname__ = "huey.registry", "Message"
    sys.modules["huey"], sys.modules["huey.registry"] = types.ModuleType("huey"), module
    try:
        return [
            pickle.dumps(
                HueyMessage(str(uuid.uuid4()), task, eta, 0, 0, None, args, {}),
                pickle.HIGHEST_PROTOCOL,
            )
            for args, eta in calls
        ]
    finally:
        HueyMessage.__module__, HueyMessage.__qualname__ = __name__, "HueyMessage"
        for name, was in saved.items():
            if was is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = was


def huey_bytes_per_job(env: BenchEnv, n: int, task: str) -> tuple[float, int]:
    """Redis bytes per task scheduled the way huey's RedisStorage stores one
    (``add_to_schedule``: ``ZADD huey.schedule.<name> {message: eta timestamp}``), ``n``
    tasks ``task(i)`` due in 1-2 hours; and the size of the last message."""
    client = raw_client(env)
    client.flushdb()
    before = env.used_memory()
    now = datetime.now(UTC).replace(tzinfo=None)  # (huey keeps naive UTC etas)
    size = 0
    for start in range(0, n, 1_000):
        calls: list[tuple[tuple[object, ...], datetime]] = [
            ((i,), now + timedelta(seconds=3_600 + (i * 7_919) % 3_600))
            for i in range(start, min(n, start + 1_000))
        ]
        messages = huey_messages(task, calls)
        size = len(messages[-1])
        pipe = client.pipeline(transaction=False)
        for message, (_, eta) in zip(messages, calls, strict=True):
            pipe.zadd("huey.schedule.bench", {message: eta.timestamp()})
        pipe.execute()
    per_job = (env.used_memory() - before) / n
    client.flushdb()
    return per_job, size
