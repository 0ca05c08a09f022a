"""The delay worker's part in periodic jobs (delayqueue.periodic): plan the declared
schedules when it starts, and at the start of every pass move on the schedules whose
occurrence has come due, on the queues that hold any (read again at each heartbeat)."""

from __future__ import annotations

import logging

from delayqueue.engine import schedules
from delayqueue.engine.reads import redis_now
from delayqueue.errors import DelayQueueError
from delayqueue.periodic import planner

logger = logging.getLogger("delayqueue.worker.loop")  # where the worker's lines are logged


def reconcile() -> planner.Reconciled | None:
    """planner.reconcile, said in one line; None when Redis could not be asked (the next
    start plans them)."""
    try:
        done = planner.reconcile()
    except DelayQueueError as exc:
        logger.error("periodic schedules not reconciled: %s", exc)
        return None
    if done.planned or done.removed or done.failed:
        logger.info(
            "periodic schedules: %s planned, %s unchanged, %s removed, %s failed",
            len(done.planned), len(done.unchanged), len(done.removed), len(done.failed),
        )  # fmt: skip
    return done


def fire(queues: list[str], ahead_ms: int) -> None:
    """Move on every schedule of ``queues`` whose occurrence came due (within ``ahead_ms``,
    as the claim that follows takes that far ahead)."""
    now = redis_now()
    for queue in queues:
        planner.fire_due(queue, now, ahead_ms)


def queues_with_schedules(queues: list[str]) -> list[str]:
    return schedules.queues_with_schedules(queues)
