"""What an async call that is cancelled (``task.cancel()``, ``asyncio.wait_for``'s time-out,
a client that went away) may have done, on a real Redis (docs/guarantees.md, "A cancelled
async call"): the command may already be on its way, so the call may have taken effect.
Each row of that table is a test here; Redis holds the commands back (``CLIENT PAUSE
WRITE``) until the call has been cancelled, so the race is the same on every run.

And the loop's shared connection stays in step: after a cancelled call, every call gets
its own reply."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Iterator
from typing import Any

import pytest
import redis

import delayqueue
from delayqueue.engine.keys import queue_keys
from tests.support import jobs
from tests.support.data_redis import only_on
from tests.support.stored import stored_job

pytestmark = only_on("single")  # CLIENT PAUSE on the one server

Q = "tests"
KEYS = queue_keys(Q)
SENT = 0.1  # seconds for a command to be written to the socket and reach Redis


@pytest.fixture
def pauser() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    yield client
    client.execute_command("CLIENT", "UNPAUSE")
    client.close()


async def cancelled_while_redis_holds_it(pauser: redis.Redis, call: Awaitable[Any]) -> None:
    """Start ``call`` while Redis holds every write, cancel it once it was sent, then let
    Redis go on. The caller sees CancelledError."""
    pauser.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
    task = asyncio.ensure_future(call)
    await asyncio.sleep(SENT)
    assert not task.done()  # held by Redis
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pauser.execute_command("CLIENT", "UNPAUSE")


def wait_for_job(r: redis.Redis, key: str) -> str | None:
    """The id of the job with dedupe key ``key``, once Redis ran what it held (a moment)."""
    for _ in range(100):
        found = r.hget(KEYS.dedupe, key)
        if found is not None:
            return str(found)
        r.ping()
    return None


def test_adelay_for_cancelled_after_it_was_sent_writes_the_job(
    r: redis.Redis, pauser: redis.Redis
) -> None:
    async def main() -> Any:
        await jobs.record.adelay_for("warm", seconds=60)  # the loop's connection is open
        call = jobs.record.adelay_for("held", seconds=60, key="held")
        await cancelled_while_redis_holds_it(pauser, call)
        written = wait_for_job(r, "held")
        # the documented way out: the same call with the same key= leaves one job
        again = await jobs.record.adelay_for("held", seconds=60, key="held")
        return written, again

    written, again = asyncio.run(main())
    assert written is not None  # the cancelled call took effect
    assert again.id == written and r.zcard(KEYS.scheduled) == 2  # "warm" and one "held"


def test_acancel_cancelled_mid_call_is_not_applied(r: redis.Redis, pauser: redis.Redis) -> None:
    job = jobs.record.delay_for("stays", seconds=60, key="stays", on_commit=False)

    async def main() -> bool:
        await cancelled_while_redis_holds_it(pauser, delayqueue.acancel(Q, key="stays"))
        r.ping()
        return await delayqueue.acancel(Q, key="stays")  # the retry applies it

    assert r.zscore(KEYS.scheduled, job.id) is not None
    assert asyncio.run(main()) is True  # so the cancelled call had not cancelled it
    assert r.zscore(KEYS.scheduled, job.id) is None


def test_a_wait_for_time_out_of_adelay_for_writes_the_job(
    r: redis.Redis, pauser: redis.Redis
) -> None:
    async def main() -> None:
        await jobs.record.adelay_for("warm", seconds=60)
        pauser.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(jobs.record.adelay_for("late", seconds=60, key="late"), SENT)
        pauser.execute_command("CLIENT", "UNPAUSE")

    asyncio.run(main())
    assert wait_for_job(r, "late") is not None


def test_the_shared_connection_stays_in_step_after_cancelled_calls(
    r: redis.Redis, pauser: redis.Redis
) -> None:
    async def main() -> list[Any]:
        await jobs.record.adelay_for("warm", seconds=60)
        for i in range(3):
            call = jobs.record.adelay_for(f"cancelled-{i}", seconds=60, key=f"cancelled-{i}")
            await cancelled_while_redis_holds_it(pauser, call)
        return list(
            await asyncio.gather(
                *(jobs.record.adelay_for(f"after-{i}", seconds=60, key=f"after-{i}")
                  for i in range(20))
            )
        )  # fmt: skip

    made = asyncio.run(main())
    for i, job in enumerate(made):  # each call got its own reply: its own job
        assert job.state == "scheduled"
        assert r.hget(KEYS.dedupe, f"after-{i}") == job.id
        assert stored_job(r, KEYS, job.id)["args"] == f'["after-{i}"]'
    assert r.zcard(KEYS.scheduled) == 1 + 3 + 20
