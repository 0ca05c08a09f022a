"""Reads of delayqueue's data as it is, for the pages, the command line and metrics.

``Reads`` is one pipeline of reads in which a key of the wrong type (a key something else
wrote) reads as a default and adds a note, rather than failing the whole read: one broken
key costs its own figure, not the page.
"""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis.exceptions import ResponseError

from delayqueue.engine.clients import get_raw_redis, redis_now_ms
from delayqueue.engine.redis_errors import redis_errors

NOTE_KEY_CHARS = 200  # most characters of a key name a note shows


def redis_now() -> int:
    """Redis's clock (TIME) in epoch ms, the clock of every due time; Redis's errors as
    delayqueue's."""
    with redis_errors():
        return redis_now_ms(get_raw_redis())


class Reads:
    """One pipeline of reads in which a key of the wrong type reads as ``default`` and adds
    a note to ``notes`` (each key once) instead of failing the page. Any other error reply
    is raised. ``add`` returns where its reply will stand in the list ``run`` returns."""

    def __init__(self, client: Redis, notes: list[str]) -> None:
        self.client = client
        self.notes = notes
        self.pipe = client.pipeline(transaction=False)
        self._keys: list[tuple[bytes | str, Any]] = []

    def add(
        self, command: str, key: bytes | str, *args: Any, default: Any = None, **kw: Any
    ) -> int:
        getattr(self.pipe, command)(key, *args, **kw)
        self._keys.append((key, default))
        return len(self._keys) - 1

    def run(self) -> list[Any]:
        replies: list[Any] = self.pipe.execute(raise_on_error=False)
        for index, reply in enumerate(replies):
            if not isinstance(reply, Exception):
                continue
            if not (isinstance(reply, ResponseError) and "WRONGTYPE" in str(reply)):
                raise reply
            key, default = self._keys[index]
            replies[index] = default
            wrong_type(self.client, key, self.notes)
        return replies


def wrong_type(client: Redis, key: bytes | str, notes: list[str]) -> None:
    """Note that ``key`` holds a type delayqueue does not write there."""
    kind = _shown(client.type(key))
    note = (
        f"Redis key {_shown(key, NOTE_KEY_CHARS)} holds a {kind}, not what delayqueue keeps "
        "there; it is shown as empty."
    )
    if note not in notes:
        notes.append(note)


def _shown(value: bytes | str, limit: int | None = None) -> str:
    """As the admin shows stored text (``api.display.text``)."""
    shown = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value
    if limit is not None and len(shown) > limit:
        return f"{shown[:limit]}… ({len(shown) - limit:,} more characters not shown)"
    return shown
