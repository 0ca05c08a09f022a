"""The async API's scenario (``--only async``): ``adelay_for`` awaited one at a time beside
the sync ``delay_for`` of the same run, and 100 concurrent ``adelay_for`` (gather) beside the
sync one-at-a-time rate and beside a raw redis.asyncio EVALSHA of a trivial script, 100
concurrent, on the same Redis. One event loop for the whole scenario (a web server's)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from redis.asyncio import Redis as AsyncRedis

from bench.env import RAW_DB, BenchEnv
from bench.report import Figure
from bench.throughput import Sizes

CONCURRENT = 100


def _noop() -> Any:
    from bench.tasks import noop

    return noop


def async_enqueue(env: BenchEnv, sizes: Sizes) -> list[Figure]:
    noop = _noop()
    n = max(CONCURRENT, sizes.enqueue)
    env.flush()
    with asyncio.Runner() as runner:
        sync, awaited = runner.run(_one_at_a_time(noop, n))
        env.flush()
        gathered = runner.run(_gathered(noop, n))
        raw = runner.run(_raw_gathered(env, n))
    env.flush()
    return [
        Figure("async", "adelay_for, awaited one at a time", awaited, "jobs/s",
               "sync delay_for, one at a time", sync, "≥ 0.8x", awaited >= 0.8 * sync),
        Figure("async", f"adelay_for, {CONCURRENT} concurrent (gather)", gathered, "jobs/s",
               "sync delay_for, one at a time", sync, "≥ 2x", gathered >= 2 * sync),
        Figure("async", f"adelay_for, {CONCURRENT} concurrent (gather)", gathered, "jobs/s",
               f"raw redis.asyncio EVALSHA 'return 1', {CONCURRENT} concurrent", raw),
    ]  # fmt: skip


async def _one_at_a_time(task: Any, n: int) -> tuple[float, float]:
    """Jobs/s of the sync ``delay_for`` and of ``adelay_for`` awaited, ``n`` of each, in
    turns of a tenth each (a machine that slows down for a while slows both alike). The
    sync calls block this loop, as they would a server's."""
    task.delay_for(0, seconds=3_600)  # connect, load scripts, remember the queue
    await task.adelay_for(0, seconds=3_600)
    spent = {"sync": 0.0, "async": 0.0}
    step = max(1, n // 10)
    for first in range(0, n, step):
        block = range(first, min(n, first + step))
        started = time.perf_counter()
        for i in block:
            task.delay_for(i, seconds=3_600 + i % 3_600)
        spent["sync"] += time.perf_counter() - started
        started = time.perf_counter()
        for i in block:
            await task.adelay_for(i, seconds=3_600 + i % 3_600)
        spent["async"] += time.perf_counter() - started
    return n / spent["sync"], n / spent["async"]


async def _gathered(task: Any, n: int) -> float:
    """Jobs/s of ``n`` ``adelay_for`` calls, ``CONCURRENT`` at a time."""
    await asyncio.gather(*(task.adelay_for(i, seconds=3_600) for i in range(CONCURRENT)))
    started = time.perf_counter()
    for first in range(0, n, CONCURRENT):
        await asyncio.gather(
            *(
                task.adelay_for(i, seconds=3_600 + i % 3_600)
                for i in range(first, first + CONCURRENT)
            )
        )
    return (n // CONCURRENT * CONCURRENT) / (time.perf_counter() - started)


async def _raw_gathered(env: BenchEnv, n: int) -> float:
    """EVALSHA of ``return 1`` with redis.asyncio's own client and ``register_script``,
    ``CONCURRENT`` at a time: the least one async round trip per job costs."""
    client = AsyncRedis(port=env.server.port, db=RAW_DB, decode_responses=True)
    try:
        script = client.register_script("return 1")
        await asyncio.gather(*(script(keys=["raw:k"], args=[i]) for i in range(CONCURRENT)))
        started = time.perf_counter()
        for first in range(0, n, CONCURRENT):
            await asyncio.gather(
                *(script(keys=["raw:k"], args=[i]) for i in range(first, first + CONCURRENT))
            )
        return (n // CONCURRENT * CONCURRENT) / (time.perf_counter() - started)
    finally:
        await client.aclose()
