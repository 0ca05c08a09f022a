"""What a queue holds: how many jobs in each state, whether it is paused, its next due time
and visibility deadline (``queue_counts``: one read shared by the admin's dashboard, the
command line's status and the metrics, one round trip for any number of queues), and the
members of a state's sorted set.

A key of the wrong type (something else wrote it) reads as None, with a note: the reader
shows what it can and says what it could not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from delayqueue.engine.clients import get_raw_redis
from delayqueue.engine.keys import State, queue_keys
from delayqueue.engine.reads import Reads
from delayqueue.engine.redis_errors import redis_errors


@dataclass(frozen=True)
class QueueCounts:
    queue: str
    scheduled: int | None
    inflight: int | None
    dead: int | None
    paused: bool | None
    next_due_ms: float | None  # the earliest scheduled job's due time; None when none
    next_deadline_ms: float | None  # the nearest visibility deadline; None when none


@dataclass(frozen=True)
class CountSlots:
    """Where each reply about one queue stands in a ``Reads`` pipeline."""

    queue: str
    scheduled: int
    inflight: int
    dead: int
    paused: int
    head: int  # ZRANGE 0 0 WITHSCORES of scheduled
    deadline: int  # ZRANGE 0 0 WITHSCORES of inflight

    @classmethod
    def add(cls, reads: Reads, queue: str) -> CountSlots:
        keys = queue_keys(queue)
        return cls(
            queue=queue,
            scheduled=reads.add("zcard", keys.scheduled),
            inflight=reads.add("zcard", keys.inflight),
            dead=reads.add("zcard", keys.dead),
            paused=reads.add("exists", keys.paused),
            head=reads.add("zrange", keys.scheduled, 0, 0, withscores=True),
            deadline=reads.add("zrange", keys.inflight, 0, 0, withscores=True),
        )

    def counts(self, replies: list[Any]) -> QueueCounts:
        paused = replies[self.paused]
        return QueueCounts(
            queue=self.queue,
            scheduled=_count(replies[self.scheduled]),
            inflight=_count(replies[self.inflight]),
            dead=_count(replies[self.dead]),
            paused=None if paused is None else bool(paused),
            next_due_ms=_first_score(replies[self.head]),
            next_deadline_ms=_first_score(replies[self.deadline]),
        )


def queue_counts(queues: list[str], notes: list[str] | None = None) -> list[QueueCounts]:
    """Each queue's counts, in one round trip."""
    if not queues:
        return []
    with redis_errors():
        reads = Reads(get_raw_redis(), [] if notes is None else notes)
        slots = [CountSlots.add(reads, queue) for queue in queues]
        replies = reads.run()
    return [slot.counts(replies) for slot in slots]


def _count(reply: Any) -> int | None:
    return reply if isinstance(reply, int) else None


def _first_score(reply: Any) -> float | None:
    """The score of a ZRANGE 0 0 WITHSCORES reply (as stored: nan and inf included)."""
    return float(reply[0][1]) if reply else None


def count(queue: str, state: State) -> int:
    """How many jobs ``queue`` holds in ``state`` (0 for a key of the wrong type)."""
    with redis_errors():
        reads = Reads(get_raw_redis(), [])
        reads.add("zcard", queue_keys(queue).of_state(state), default=0)
        return int(reads.run()[0])


def members(queue: str, state: State, start: int, stop: int) -> list[bytes]:
    """The ids at ranks ``start`` to ``stop`` (inclusive) of ``state``'s sorted set, lowest
    score first, as stored (any bytes)."""
    with redis_errors():
        found = get_raw_redis().zrange(queue_keys(queue).of_state(state), start, stop)
        return cast(list[bytes], found)


def is_paused(queue: str) -> bool:
    with redis_errors():
        return bool(get_raw_redis().exists(queue_keys(queue).paused))
