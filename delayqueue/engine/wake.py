"""The wake channels a delay worker listens on (pub/sub, ``QueueKeys.wake``): enqueue.lua
and reschedule.lua publish on a queue's channel when a job becomes its earliest, resume.lua
when the queue is resumed, so a sleeping worker claims at once instead of at its next poll.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis
from redis.client import PubSub

from delayqueue.engine.clients import get_redis
from delayqueue.engine.keys import queue_keys


class WakeLost(Exception):
    """The channels' connection failed; they are closed, and subscribed again at the next
    ``listen``."""


class WakeChannels:
    def __init__(self) -> None:
        self._pubsub: PubSub | None = None
        self._subscribed: set[str] = set()

    def listen(self, queues: Iterable[str]) -> None:
        """Subscribe to the channels of ``queues`` not subscribed yet."""
        wanted = {queue_keys(q).wake for q in queues}
        if self._pubsub is None:
            self._pubsub = get_redis().pubsub(ignore_subscribe_messages=True)
            self._subscribed = set()
        if wanted - self._subscribed:
            self._pubsub.subscribe(*(wanted - self._subscribed))
            self._subscribed |= wanted

    @property
    def listening(self) -> bool:
        return self._pubsub is not None

    @property
    def port(self) -> int | None:
        """The port of the server the channels' connection is on (None when none is)."""
        connection = self._pubsub.connection if self._pubsub is not None else None
        return None if connection is None else int(connection.port)

    def wait(self, seconds: float) -> bool:
        """Wait up to ``seconds`` for a message on any channel: True when one came (the
        others that came with it are read too). WakeLost when the connection failed."""
        pubsub = self._pubsub
        if pubsub is None:
            raise WakeLost("not listening")
        try:
            message = pubsub.get_message(ignore_subscribe_messages=True, timeout=seconds)
            if message is None:
                return False
            while pubsub.get_message(ignore_subscribe_messages=True, timeout=0):
                pass
            return True
        except (redis.RedisError, OSError) as exc:
            self.close()
            raise WakeLost(str(exc)) from exc

    def close(self) -> None:
        pubsub, self._pubsub, self._subscribed = self._pubsub, None, set()
        if pubsub is not None:
            pubsub.close()
