"""The delay worker's part in periodic jobs (delayqueue.periodic): plan the declared
schedules when it starts, and at the start of every pass move on the schedules whose
occurrence has come due, on the queues that hold any (read again at each heartbeat).

Both run in guards of their own: what a schedule's data (or a bug the planner has not met
yet) raises is said and the worker goes on, so no schedule can stop a worker's start or
its claims of every other job."""

from __future__ import annotations

import logging

from delayqueue.engine import schedules
from delayqueue.engine.reads import redis_now
from delayqueue.errors import DelayQueueError, RedisUnavailable
from delayqueue.periodic import planner
from delayqueue.worker.served_queues import say_once

logger = logging.getLogger("delayqueue.worker.loop")  # where the worker's lines are logged


def reconcile() -> planner.Reconciled | None:
    """planner.reconcile, said in one line; None when it could not run (Redis could not be
    asked, or a declaration could not be read): the next start plans them."""
    try:
        done = planner.reconcile()
    except DelayQueueError as exc:
        logger.error("periodic schedules not reconciled: %s", exc)
        return None
    except Exception:  # a bug must not stop the worker's start: its jobs still run
        logger.exception("periodic schedules not reconciled")
        return None
    if done.planned or done.removed or done.failed:
        logger.info(
            "periodic schedules: %s planned, %s unchanged, %s removed, %s failed",
            len(done.planned), len(done.unchanged), len(done.removed), len(done.failed),
        )  # fmt: skip
    return done


def fire(queues: list[str], ahead_ms: int) -> None:
    """Move on every schedule of ``queues`` whose occurrence came due (within ``ahead_ms``,
    as the claim that follows takes that far ahead). Raises only RedisUnavailable (which
    the claims would meet too); anything else is that queue's schedules' problem, said
    once, and the claims of the pass go on."""
    now = redis_now()
    for queue in queues:
        try:
            planner.fire_due(queue, now, ahead_ms)
        except RedisUnavailable:
            raise
        except DelayQueueError as exc:  # its schedules zset of the wrong type, say
            say_once(f"the schedules of queue {queue} cannot move on: {exc}")
        except Exception as exc:  # a bug must not stop the claims: the jobs still run
            say_once(f"the schedules of queue {queue} cannot move on: {exc!r}")
            logger.debug("the schedules of queue %s cannot move on", queue, exc_info=True)


def queues_with_schedules(queues: list[str]) -> list[str]:
    return schedules.queues_with_schedules(queues)
