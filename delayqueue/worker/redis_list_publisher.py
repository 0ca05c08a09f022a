"""The fast path to a Redis broker: the message ``send_task`` builds (task protocol 2, kombu's
Redis envelope), pushed a whole batch at a time onto the queues' lists in one MULTI/EXEC round
trip. ``send_task`` makes a Redis client per message and reaches about 1,600 messages/s; this
path is many times that. It writes Celery's broker, not delayqueue's data: the one module
outside the engine that imports redis (a named exemption in the import contracts)."""

from __future__ import annotations

import base64
import json
import logging
import uuid
from dataclasses import dataclass
from itertools import groupby
from typing import Any

import celery.app.base as celery_app_base
import redis
from celery import Celery, signals
from celery.app.routes import MapRoute
from celery.utils.nodenames import anon_nodename
from celery.utils.saferepr import saferepr
from kombu import Connection
from kombu.entity import maybe_delivery_mode
from kombu.exceptions import OperationalError

from delayqueue.wire import RUN_BATCH
from delayqueue.worker.publisher import PublishError, SendTaskPublisher, TaskMessage

logger = logging.getLogger(
    "delayqueue.worker.publisher_choice"
)  # where these lines were always logged

REDIS_SCHEMES = ("redis", "rediss", "sentinel")  # kombu's Redis transports

# Task options the fast path reproduces; any other option with a value sends the message
# through send_task instead.
_FAST_OPTIONS = {"priority", "delivery_mode"}
_EMBED = '{"callbacks": null, "errbacks": null, "chain": null, "chord": null}'


# Celery 5.7 moved a task's own time limits into send_task's ``timelimit`` header; before it
# the header stayed empty and the worker applied the task's limits itself (the same limits
# either way). The message written here is the installed Celery's, byte for byte.
SEND_TASK_SENDS_TASK_LIMITS = hasattr(celery_app_base, "_OMITTED")


@dataclass(frozen=True)
class _Route:
    """Where and how the messages of one task go, as send_task would send them."""

    queue: Any  # the kombu Queue (direct exchange: its name is the list's name)
    priority: int
    delivery_mode: int
    time_limit: float | None
    soft_time_limit: float | None


class RedisListPublisher:
    """The messages ``send_task`` would publish, LPUSHed onto kombu's Redis lists: one
    MULTI/EXEC round trip per batch, so a batch is published whole or not at all."""

    def __init__(self, app: Celery) -> None:
        self.app = app
        self.fallback = SendTaskPublisher(app)
        conf = app.conf
        self.argsrepr_maxsize = int(app.amqp.argsrepr_maxsize)
        self.kwargsrepr_maxsize = int(app.amqp.kwargsrepr_maxsize)
        # (Celery 5.5 made the depth a setting; 5.4 used its saferepr default, 3)
        self.repr_maxlevels = int(conf.get("task_repr_maxlevels", 3))
        # the kwargsrepr of most messages (no kwargs), worked out once
        self.no_kwargsrepr = saferepr({}, self.kwargsrepr_maxsize, self.repr_maxlevels)
        self.default_delivery_mode = conf.task_default_delivery_mode
        self.reply_to = str(app.thread_oid)
        self.origin = anon_nodename()
        # Routers that are functions may route by the arguments: route every message then.
        routes: Any = getattr(app.amqp.router, "routes", ())
        self.routes_are_static = all(isinstance(r, MapRoute) for r in routes)
        self._routes: dict[tuple[str, str], _Route | None] = {}
        self._connection: Connection | None = None
        self._channel: Any = None  # kombu.transport.redis.Channel
        self._client: redis.Redis | None = None
        self._declared: set[str] = set()
        self._lists: set[str] = set()  # the broker's lists published to
        self.waiting = 0

    @staticmethod
    def supports(app: Celery) -> bool:
        """Whether the app's broker is kombu's Redis transport and its messages are the
        plain protocol-2 JSON messages this publisher builds."""
        conf = app.conf
        url = str(conf.broker_write_url or "")
        return (
            url.partition("://")[0].lower() in REDIS_SCHEMES
            and int(conf.task_protocol) == 2
            and not conf.task_send_sent_event
            and conf.task_serializer == "json"
            and not conf.task_compression
        )

    # ---- publishing ------------------------------------------------------------------

    def publish(self, messages: list[TaskMessage]) -> None:
        if _publish_signals_connected():
            # Receivers may add headers or trace the publish: only send_task runs them.
            self.fallback.publish(messages)
            return
        routed = [(message, self._route_of(message)) for message in messages]
        published = 0
        for fast, run in groupby(routed, key=lambda pair: pair[1] is not None):
            batch = list(run)
            try:
                if fast:
                    self._push(batch)  # type: ignore[arg-type]
                else:
                    self.fallback.publish([message for message, _ in batch])
            except PublishError as exc:
                raise PublishError(published + exc.published, exc.cause) from exc.cause
            published += len(batch)

    def _push(self, batch: list[tuple[TaskMessage, _Route]]) -> None:
        """One round trip: an LPUSH per run of messages bound for the same list, in a
        MULTI/EXEC when there are several (one LPUSH of many values is atomic by itself)."""
        try:
            client = self._connect()
            for _, route in batch:
                self._declare(route)
            pushes: list[tuple[str, list[str]]] = []
            for key, run in groupby(batch, key=lambda pair: self._list_key(pair[1])):
                pushes.append((key, [self.encode(message, route) for message, route in run]))
            pipe = client.pipeline(transaction=len(pushes) > 1)
            for key, payloads in pushes:
                pipe.lpush(key, *payloads)
                self._lists.add(key)
            replies = pipe.execute(raise_on_error=False)
        except (redis.RedisError, OperationalError, OSError) as exc:
            self._disconnect()
            raise PublishError(0, exc) from exc
        # EXEC does not roll back a command that failed inside it (a list key of another
        # type): count the messages of the leading pushes that went out. Jobs published after
        # a failed push are released too and dispatched again with a new fencing token, so
        # their first message finds a stale token and does not run.
        published = 0
        for (_, payloads), reply in zip(pushes, replies, strict=True):
            if isinstance(reply, Exception):
                raise PublishError(published, reply)
            published += len(payloads)
        # LPUSH answers with the list's length: what was there before this push is how far
        # the Celery workers (which reserve their prefetch off the list) are behind.
        self.waiting = max(
            int(reply) - len(payloads) for (_, payloads), reply in zip(pushes, replies, strict=True)
        )

    def queue_of(self, message: TaskMessage) -> str | None:
        route = self._route_of(message)
        return None if route is None else str(route.queue.name)

    def backlog(self) -> int | None:
        lists = sorted(self._lists)
        if not lists:
            return 0
        try:
            pipe = self._connect().pipeline(transaction=False)
            for key in lists:
                pipe.llen(key)
            return sum(int(n) for n in pipe.execute())
        except (redis.RedisError, OperationalError, OSError):
            self._disconnect()
            return None

    # ---- the message -----------------------------------------------------------------

    def encode(self, message: TaskMessage, route: _Route) -> str:
        """The JSON kombu's Redis transport stores for ``send_task(message...)``."""
        task_id = str(uuid.uuid4())
        args, kwargs = message.args or (), message.kwargs or {}  # as Celery's as_task_v2
        headers: dict[str, Any] = {
            "lang": "py",
            "task": message.name,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [route.time_limit, route.soft_time_limit],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": message.argsrepr
            or saferepr(args, self.argsrepr_maxsize, self.repr_maxlevels),
            "kwargsrepr": self.no_kwargsrepr
            if type(kwargs) is dict and not kwargs
            else saferepr(kwargs, self.kwargsrepr_maxsize, self.repr_maxlevels),
            "origin": self.origin,
            "ignore_result": True,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
            **message.headers,
        }
        body = f"[{json.dumps(args)}, {json.dumps(kwargs)}, {_EMBED}]"
        body_encoding = self._channel.body_encoding
        if body_encoding == "base64":
            encoded = base64.b64encode(body.encode()).decode("ascii")
        else:
            encoded, body_encoding = self._channel.encode_body(body, body_encoding)
        return json.dumps(
            {
                "body": encoded,
                "content-encoding": "utf-8",
                "content-type": "application/json",
                "headers": headers,
                "properties": {
                    "correlation_id": task_id,
                    "reply_to": self.reply_to,
                    "delivery_mode": route.delivery_mode,
                    "delivery_info": {"exchange": "", "routing_key": route.queue.name},
                    "priority": route.priority,
                    "body_encoding": body_encoding,
                    "delivery_tag": str(uuid.uuid4()),
                },
            }
        )

    def _list_key(self, route: _Route) -> str:
        """kombu's list for the queue at this priority (the plain name for priority 0)."""
        return str(self._channel._q_for_pri(route.queue.name, route.priority))

    # ---- routing ---------------------------------------------------------------------

    def _route_of(self, message: TaskMessage) -> _Route | None:
        """Where send_task would send this message, or None when only send_task can."""
        if not self.routes_are_static:
            return self._route(message.name, message.route_name, message.args, message.kwargs)
        cache_key = (message.name, message.route_name)
        if cache_key not in self._routes:
            self._routes[cache_key] = self._route(message.name, message.route_name, [], {})
        return self._routes[cache_key]

    def _route(
        self, name: str, route_name: str, args: list[Any], kwargs: dict[str, Any]
    ) -> _Route | None:
        """send_task's routing: the task's own options, then the app's router. A batch
        message goes where its task's messages go, without the task's time limits (they
        are a job's, not a batch's)."""
        batch = name == RUN_BATCH
        task: Any = self.app.tasks.get(route_name if batch else name)
        options: dict[str, Any] = {}
        if task is not None:
            exec_options = task._get_exec_options()
            options = {k: v for k, v in exec_options.items() if v is not None}
        # send_task takes these three out before routing: they become headers.
        time_limit = options.pop("time_limit", None)
        soft_time_limit = options.pop("soft_time_limit", None)
        if batch or not SEND_TASK_SENDS_TASK_LIMITS:
            time_limit = soft_time_limit = None
        if options.pop("expires", None) is not None:
            return None
        options = self.app.amqp.router.route(options, route_name or name, tuple(args), kwargs, task)
        queue = options.pop("queue", None)
        if options.pop("serializer", "json") != "json":
            return None
        if any(v is not None for k, v in options.items() if k not in _FAST_OPTIONS):
            return None  # exchange, routing_key, compression, ... (message properties)
        if queue is None or queue.exchange is None or queue.exchange.type != "direct":
            return None
        if queue.expires or queue.message_ttl or (queue.queue_arguments or {}).get("x-expires"):
            return None
        return _Route(
            queue=queue,
            priority=int(options.get("priority") or 0),
            delivery_mode=maybe_delivery_mode(
                options.get("delivery_mode")
                or queue.exchange.delivery_mode
                or self.default_delivery_mode
            )
            or 2,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
        )

    # ---- the broker connection -------------------------------------------------------

    def _connect(self) -> redis.Redis:
        """kombu's own Redis client for the broker (its URL, TLS, key prefix, timeouts,
        priority steps), made once and kept."""
        if self._client is None:
            self._connection = self.app.connection_for_write()
            self._channel = self._connection.channel()
            self._client = self._channel._create_client()
        return self._client

    def close(self) -> None:
        self._disconnect()

    def warm_up(self, names: list[str]) -> None:
        """Connect, then route, declare and encode (without sending) one message of each
        task and of its batches: about 30 ms of first-time work in a new process."""
        self._connect().ping()
        for name in names:
            for message in (
                TaskMessage(name, [], {}, {}, name),
                TaskMessage(RUN_BATCH, [], {}, {}, name),
            ):
                route = self._route_of(message)
                if route is not None:
                    self._declare(route)
                    self.encode(message, route)

    def _declare(self, route: _Route) -> None:
        """Declare the route's queue once per connection, as send_task's producer does."""
        if route.queue.name not in self._declared:
            route.queue(self._channel).declare()
            self._declared.add(route.queue.name)

    def _disconnect(self) -> None:
        connection = self._connection
        self._connection = self._channel = self._client = None
        self._declared.clear()
        if connection is not None:
            try:
                connection.release()
            except Exception:
                logger.debug("closing the broker connection failed", exc_info=True)


def _publish_signals_connected() -> bool:
    return bool(
        signals.before_task_publish.receivers
        or signals.after_task_publish.receivers
        or signals.task_sent.receivers
    )
