"""Which queues a delay worker started without ``--queues`` serves: every queue in Redis's
queue registry (engine/roster.py) and every queue a ``@delayed_task`` of its Celery app
declares, each with its shards. Read again at every heartbeat, so a queue first used after
the worker started is served within seconds."""

from __future__ import annotations

import logging

from celery import Celery

from delayqueue.conf import get_settings
from delayqueue.engine import roster
from delayqueue.engine.shards import shard_names
from delayqueue.errors import DelayQueueError, RedisUnavailable
from delayqueue.wire import declared_queue, is_delayed_task

logger = logging.getLogger("delayqueue.worker.loop")  # where these lines were always logged


def served_queues(app: Celery) -> list[str]:
    """The registry's queues and the app's declared queues, with their shards, sorted."""
    known = set(_known_queue_names())
    known |= {
        shard
        for task in app.tasks.values()
        if is_delayed_task(task)
        for shard in shard_names(declared_queue(task) or get_settings().default_queue)
    }
    return sorted(known)


def _known_queue_names() -> list[str]:
    """The registry of queues (engine/roster.py), its entries that are no queue name or a
    registry of the wrong type said once at ERROR: then only the tasks' queues are served."""
    notes: list[str] = []
    try:
        found = roster.queue_names(notes)
    except RedisUnavailable:
        raise
    except DelayQueueError as exc:
        say_once(f"cannot read the queue registry: {exc}")
        return []
    for note in notes:
        say_once(f"cannot read the queue registry: {note}")
    for entry, why in found.ignored:
        say_once(f"ignoring queue {entry} found in Redis: {why}")
    return found.names


_said: set[str] = set()  # registry problems logged at ERROR already (bounded below)


def say_once(problem: str) -> None:
    """A problem of the queue registry at ERROR the first time this process meets it, then
    at DEBUG: the registry is read every heartbeat, and one bad entry must not fill the log."""
    if problem in _said:
        logger.debug("%s (again)", problem)
        return
    if len(_said) < 1_000:
        _said.add(problem)
    logger.error("%s", problem)
