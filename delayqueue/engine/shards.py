"""Sharded queues. A queue declared with N shards (``@delayed_task(queue="orders",
shards=8)`` or ``DELAYQUEUE["SHARDS"] = {"orders": 8}``) is N queues of their own,
``orders~0`` ... ``orders~7``: each has its own hash tag, so a Redis Cluster spreads them
over its slots and masters, and each is claimed, browsed and counted as any queue is.

A job goes to the shard its dedupe key hashes to, so scheduling, cancelling and
rescheduling by key stay one call on one shard; a job without a key goes to the shard its
id hashes to. By id alone, ``cancel`` and ``reschedule`` ask every shard in one round trip.
A worker given ``orders`` claims from all its shards, every pass; given ``orders~3``, from
that one. Changing N later moves where new jobs and key lookups go; jobs already on a shard
stay there and are still dispatched (workers claim every shard in the registry)."""

from __future__ import annotations

import threading
from zlib import crc32

from delayqueue.conf import get_settings
from delayqueue.errors import InvalidOption
from delayqueue.validators import SHARD_SEPARATOR as SEPARATOR
from delayqueue.validators import check_shards

_lock = threading.Lock()
_declared: dict[str, int] = {}  # queue -> shards, from @delayed_task(shards=...)
_limited: set[str] = set()  # queues with a task that has a rate or concurrency


def declare(queue: str, shards: int) -> None:
    """Record that ``queue`` has ``shards`` shards (a task says so). Two tasks that say
    otherwise of one queue are refused: their jobs would be looked for on other shards."""
    check_shards(shards)
    with _lock:
        known = _declared.setdefault(queue, shards)
    if known != shards:
        raise InvalidOption(
            f"queue {queue!r} is declared with {known} shards elsewhere, not {shards}: every "
            "task of a queue must agree (or set DELAYQUEUE['SHARDS'])"
        )


def declare_limited(queue: str) -> None:
    """Record that a task of ``queue`` has a rate or concurrency: its jobs go to the shard
    their limit's name hashes to (``limit_routing``), so that one limit's jobs and state are
    in one slot, and a dedupe key is looked for on every shard (docs/limits.md)."""
    with _lock:
        _limited.add(queue)


def routes_by_limit(queue: str) -> bool:
    """Whether a job of ``queue`` with a dedupe key may be on another shard than its key's."""
    return logical(queue) in _limited


def shard_count(queue: str) -> int:
    """How many shards ``queue`` has: the SHARDS setting's, else what its tasks declare,
    else 1. A shard's own name (``orders~3``) is one queue."""
    if SEPARATOR in queue:
        return 1
    configured = (get_settings().shards or {}).get(queue)
    return int(configured) if configured is not None else _declared.get(queue, 1)


def shard_names(queue: str) -> list[str]:
    """The queues ``queue`` is: itself, or its shards."""
    count = shard_count(queue)
    if count == 1:
        return [queue]
    return [f"{queue}{SEPARATOR}{index}" for index in range(count)]


def shard_for(queue: str, routing: str) -> str:
    """The queue a job of ``queue`` routed by ``routing`` (its key, else its id) lives in."""
    count = shard_count(queue)
    if count == 1:
        return queue
    return f"{queue}{SEPARATOR}{crc32(routing.encode('utf-8', 'surrogatepass')) % count}"


def logical(queue: str) -> str:
    """The queue a shard belongs to (``orders~3`` -> ``orders``); other names as they are."""
    return queue.partition(SEPARATOR)[0]


def shard_index(queue: str) -> int | None:
    """The index of a shard's name (``orders~3`` -> 3); None for a queue that is no shard."""
    _, separator, index = queue.partition(SEPARATOR)
    return int(index) if separator and index.isascii() and index.isdigit() else None
