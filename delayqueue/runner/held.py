"""A job's message that arrives ahead of its due time (DISPATCH_AHEAD) waits in the Celery
worker's consumer, not in a pool slot, until ``HAND_OVER_AHEAD`` before it; then it goes to
the pool, whose slot begins the job and holds it the rest of the way
(``attempt.hold_until_due``, by Redis's clock).

Without it, the pool takes each message as it arrives and its slot sleeps until the due
time: at 250 jobs/s and DISPATCH_AHEAD 0.05 s, twelve jobs wait at any instant, more than a
``-P threads -c 4`` worker has threads. The jobs behind them wait for a thread, and one
freed late (a begin slow to reply, a thread that did not get the GIL or the CPU) starts the
next ones late. Held messages still count against the prefetch limit, as they did in the
pool's queue: when more wait than it allows, the next ones wait on the broker's list, where
the delay worker sees a backlog and batches the jobs of its next passes (fewer messages,
less of the worker's time per job; measured: not counting them, 480 jobs/s on ``-c 4`` went
unbatched and late, p99 12-56 ms against 4-8 ms).

How long a message waits is relative, never read off this host's clock: the due time minus
the claim time (both Redis's, from the message's headers) less HAND_OVER_AHEAD, counted
from when the message arrived (after the claim: it never waits past the point).
A message without them (a job due already, a message from an older delay worker) goes to
the pool at once, as before; a batch waits until HAND_OVER_AHEAD before its first job.

For the pools that run jobs in the worker's own process (``-P threads``, ``solo``,
``gevent``, ``eventlet``). Not for prefork, whose slots are processes of their own: there an
earlier form of this (holding until 25 ms before, outside the prefetch limit) made the tail
later (three rounds of 1,000 jobs at 250/s, ``-c 2``: p99 45/63/56 ms held against 45/14/26
ms not). A consumer bootstep (``HeldDispatches``) wraps the strategies of delayqueue's
messages once Celery has made them, each time the consumer starts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import bootsteps

from delayqueue.validators import MAX_DISPATCH_AHEAD
from delayqueue.wire import (
    HEADER_CLAIMED,
    HEADER_DUE,
    RUN_BATCH,
    RUN_TASK,
    epoch_ms,
    is_delayed_task,
)

# Seconds before its due time a held message goes to the pool: enough for a slot to take it
# and begin the job (one round trip) while the consumer's thread or the host is busy for a
# while. Measured on -P threads -c 4 at 250 jobs/s (DISPATCH_AHEAD 0.05): 0.01 and 0.025 made
# the consumer's late hand-overs the tail; 0.035 did not.
HAND_OVER_AHEAD = 0.035


def hold_seconds(headers: Any) -> float:
    """How long a message with ``headers`` waits in the consumer from its arrival (0: none)."""
    if not isinstance(headers, dict):
        return 0.0
    due, claimed = epoch_ms(headers.get(HEADER_DUE)), epoch_ms(headers.get(HEADER_CLAIMED))
    if due is None or claimed is None:
        return 0.0
    ahead = min((due - claimed) / 1000, MAX_DISPATCH_AHEAD)
    return max(0.0, ahead - HAND_OVER_AHEAD)


def in_process(pool: Any) -> bool:
    """Whether a Celery worker's pool runs jobs in the worker's own process (every pool but
    prefork, whose slots are processes of their own)."""
    from celery.concurrency.prefork import TaskPool as PreforkPool

    return not isinstance(pool, PreforkPool)


def held(handle: Callable[..., Any], consumer: Any) -> Callable[..., Any]:
    """``handle`` (a task's strategy) for messages that go to the pool ``hold_seconds``
    after they arrive."""
    timer = consumer.timer
    pending: set[Any] = consumer.__dict__.setdefault("dq_held", set())

    def handler(message: Any, *args: Any, **kwargs: Any) -> Any:
        wait = hold_seconds(getattr(message, "headers", None))
        if wait <= 0:
            return handle(message, *args, **kwargs)
        entry: Any = None

        def release() -> None:
            pending.discard(entry)
            handle(message, *args, **kwargs)

        entry = timer.call_after(wait, release, priority=6)
        pending.add(entry)
        return None

    return handler


class HeldDispatches(bootsteps.StartStopStep):
    """Consumer bootstep: delayqueue's messages are held by ``held`` (after Celery's Tasks
    step has made every task's strategy)."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def start(self, c: Any) -> None:
        if not in_process(c.pool):
            return
        for name, task in c.app.tasks.items():
            if name in c.strategies and (name in (RUN_TASK, RUN_BATCH) or is_delayed_task(task)):
                c.strategies[name] = held(c.strategies[name], c)

    def stop(self, c: Any) -> None:
        """Messages still held are not run here: with the broker's ack emulation they go
        back to the queue with the other unacked ones; without it, their jobs are reaped
        after their visibility timeout, as any prefetched message's."""
        for entry in c.__dict__.pop("dq_held", set()):
            entry.cancel()

    shutdown = stop
