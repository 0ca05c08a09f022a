"""Deployment-wide limits in Redis (docs/limits.md): what a limited job carries to
enqueue.lua, and the read of each limit's state for the admin and the command line.

A job with a rate or concurrency limit, or an expiry, has a hash from the start; its field
``lim`` holds its limits and limit key, ``exp`` the ms after which it is not started
(lua/_limits.lua). The state of one limit lives in the job's queue's slot, under
``QueueKeys.limit_prefix + limit_name(task, limit_key)``: ``:r`` the rate's sliding-window
log, ``:c`` the jobs holding a slot, ``:w`` the jobs waiting for one."""

from __future__ import annotations

from dataclasses import dataclass

from delayqueue.engine.clients import get_raw_redis, redis_now_ms
from delayqueue.engine.keys import limit_name, queue_keys
from delayqueue.engine.reads import Reads
from delayqueue.engine.redis_errors import redis_errors

WINDOW_MS = {"s": 1_000, "m": 60_000, "h": 3_600_000}


@dataclass(frozen=True)
class Limits:
    """A task's limits: at most ``rate`` starts in any ``window_ms`` (0: no rate), at most
    ``concurrency`` running at once (0: none)."""

    rate: int = 0
    window_ms: int = 1_000
    concurrency: int = 0

    def __bool__(self) -> bool:
        return bool(self.rate or self.concurrency)

    @property
    def rate_text(self) -> str:
        """The rate as it is written: "20/s"; "" for none."""
        if not self.rate:
            return ""
        unit = next((u for u, ms in WINDOW_MS.items() if ms == self.window_ms), None)
        return f"{self.rate}/{unit}" if unit else f"{self.rate}/{self.window_ms}ms"


def limits_arg(limits: Limits | None, limit_key: str, expires_ms: int | None) -> str:
    """enqueue.lua's limits argument of one job: "" for a job with neither limits nor an
    expiry, else "<expires ms or ''>\\n<lim or ''>" (lim: rate, window, concurrency, key)."""
    if not limits and expires_ms is None:
        return ""
    lim = ""
    if limits:
        lim = f"{limits.rate}\n{limits.window_ms}\n{limits.concurrency}\n{limit_key}"
    return f"{'' if expires_ms is None else expires_ms}\n{lim}"


@dataclass(frozen=True)
class LimitState:
    """One limit's state as Redis holds it now: the starts its rate counted in the window
    ending now, the jobs holding a slot, the due jobs waiting for one."""

    queue: str
    task: str
    limit_key: str
    starts: int
    running: int
    waiting: int


MOST_LIMITS = 100  # limits (keys) of one task read at once
SCAN_BUDGET = 10_000  # keys a read looks at to find them


def limit_states(queue: str, task: str, window_ms: int, notes: list[str]) -> list[LimitState]:
    """The state of task ``task``'s limits on ``queue`` (without a key, and each limit key
    with state), at most MOST_LIMITS of them; an idle limit has none (its keys expired)."""
    keys = queue_keys(queue)
    head = keys.limit_prefix + limit_name(task)
    client = get_raw_redis()
    with redis_errors():
        found: list[str] = []
        for number, key in enumerate(
            client.scan_iter(match=_glob_escaped(head) + "*", count=1_000)
        ):
            base = key.decode("utf-8", "surrogateescape")[:-2]
            if base not in found:
                found.append(base)
            if len(found) >= MOST_LIMITS or number >= SCAN_BUDGET:
                break
        now = redis_now_ms(client)
        reads = Reads(client, notes)
        slots = [
            (
                base,
                reads.add("zcount", base + ":r", f"({now - window_ms}", "+inf", default=0),
                reads.add("zcount", base + ":c", f"({now}", "+inf", default=0),
                reads.add("zcard", base + ":w", default=0),
            )
            for base in sorted(found)
        ]
        replies = reads.run()
    return [
        LimitState(queue, task, base[len(head) :], replies[r], replies[c], replies[w])
        for base, r, c, w in slots
    ]


def _glob_escaped(text: str) -> str:
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)
