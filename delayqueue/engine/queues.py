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
from delayqueue.engine.keys import STAT_FIELDS, STATES, State, queue_keys
from delayqueue.engine.reads import Reads
from delayqueue.engine.redis_errors import redis_errors

Entry = tuple[bytes, float]  # a sorted set's member (as stored) and its score


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


def count(queue: str, state: State, notes: list[str]) -> int:
    """How many jobs ``queue`` holds in ``state`` (0 for a key of the wrong type, noted)."""
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
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


def entries(
    queue: str, state: State, start: int, stop: int, *, newest_first: bool, notes: list[str]
) -> list[Entry]:
    """Ranks ``start`` to ``stop`` of ``state``'s sorted set with their scores, lowest score
    first or highest (a set of the wrong type reads as empty, with a note)."""
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        command = "zrevrange" if newest_first else "zrange"
        reads.add(command, queue_keys(queue).of_state(state), start, stop, withscores=True,
                  default=[])  # fmt: skip
        return list(reads.run()[0])


def states_of(queue: str, member: bytes, notes: list[str]) -> dict[State, float | None]:
    """The score of ``member`` in each state's sorted set (None where it is not)."""
    keys = queue_keys(queue)
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        for state in STATES:
            reads.add("zscore", keys.of_state(state), member)
        return dict(zip(STATES, reads.run(), strict=True))


def id_of_key(queue: str, key: str, notes: list[str]) -> bytes | None:
    """The id of the job dedupe key ``key`` names, as stored; None when none does."""
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        reads.add("hget", queue_keys(queue).dedupe, key.encode("utf-8", "surrogatepass"))
        found: bytes | None = reads.run()[0]
        return found


def holds_jobs(queue: str) -> bool:
    """Whether any state's sorted set of ``queue`` exists."""
    keys = queue_keys(queue)
    with redis_errors():
        reads = Reads(get_raw_redis(), [])
        reads.add("exists", keys.scheduled, keys.inflight, keys.dead, default=0)
        return int(reads.run()[0]) > 0


# ---- for the dashboard: counts with per-minute counters, due times by span ----------------


def counts_and_stats(
    queues: list[str], minute: int, minutes: int, notes: list[str]
) -> list[tuple[QueueCounts, list[list[Any]]]]:
    """Each queue's counts and the counters (``STAT_FIELDS``, as stored) of its stats hashes
    of epoch minute ``minute`` and of each of the ``minutes - 1`` before, newest first, in
    one round trip."""
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        slots = []
        for queue in queues:
            keys = queue_keys(queue)
            counted = CountSlots.add(reads, queue)
            stats = [
                reads.add(
                    "hmget",
                    keys.stats(minute - back),
                    STAT_FIELDS,
                    default=[None] * len(STAT_FIELDS),
                )  # fmt: skip
                for back in range(minutes)
            ]
            slots.append((counted, stats))
        replies = reads.run()
    return [(counted.counts(replies), [replies[i] for i in stats]) for counted, stats in slots]


def due_between(queues: list[str], spans: list[tuple[float, float]], notes: list[str]) -> list[int]:
    """For each span ``(start, end)`` of due times (ms; ``end`` excluded, ``-inf`` allowed),
    how many scheduled jobs of all ``queues`` together fall in it: one round trip."""
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        for queue in queues:
            zset = queue_keys(queue).scheduled
            for start, end in spans:
                reads.add("zcount", zset, _bound(start), f"({_bound(end)}", default=0)
        replies = reads.run()
    width = len(spans)
    return [sum(int(replies[q * width + i]) for q in range(len(queues))) for i in range(width)]


def _bound(ms: float) -> str:
    return "-inf" if ms == float("-inf") else str(int(ms))
