"""Helpers of the fuzzers (tests/scheduling/test_fuzz_api.py, tests/engine/test_fuzz_stored.py):
Redis snapshots, the messages a delay worker published to the parked broker, running them the
way the Celery side does, and hostile values to plant in Redis."""

from __future__ import annotations

import base64
import os
import pickle
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import redis
from kombu.utils.json import loads as kombu_loads

from delayqueue.engine.keys import global_keys
from delayqueue.errors import DelayQueueError
from delayqueue.runner.job import run_job
from tests.support.celery_apps import parked_broker_url

BROKER_QUEUE = "celery"  # Celery's default queue list on the broker
RUN_TASK = "delayqueue.run_task"

NOT_UTF8 = b"\xff\xfe\x80 not utf-8 \xc3"
# What `pickle.dumps(os.system)`-style planting looks like: a pickle that would call a
# function when loaded (nothing in Redis may ever be unpickled).


def set_wrong_type(raw: redis.Redis, key: str, kind: str) -> None:
    """Make ``key`` a ``kind`` ("string", "list", "set", else a sorted set) holding junk (the
    schedule and results fuzzers; the stored-data fuzzer plants richer junk of its own)."""
    raw.delete(key)
    if kind == "string":
        raw.set(key, NOT_UTF8)
    elif kind == "list":
        raw.rpush(key, b"a list")
    elif kind == "set":
        raw.sadd(key, b"a set")
    else:
        raw.zadd(key, {b"a zset": 1})


class _Planted:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("echo planted pickle was loaded >&2",))


PICKLE = pickle.dumps(_Planted(), protocol=2)
PICKLE_ASCII = pickle.dumps({"planted": [1, 2]}, protocol=0)
YEAR_0_MS = -62_135_596_800_001  # 0000-12-31T23:59:59.999Z, just before year 1
YEAR_MINUS_10000_MS = -377_705_116_800_000
AFTER_YEAR_9999_MS = 253_402_300_800_000


def raw_redis(db: int = 0) -> redis.Redis:
    """The suite's Redis, bytes in and bytes out."""
    return redis.Redis(port=int(os.environ["DQ_TEST_REDIS_PORT"]), db=db, socket_timeout=30)


def parked_broker() -> redis.Redis:
    return redis.Redis.from_url(parked_broker_url(), socket_timeout=30)


Snapshot = dict[bytes, tuple[bytes | None, bool]]


def keys_of_the_test(client: Any) -> list[Any]:
    """Every key of delayqueue's database but those other processes write on their own
    schedule: the suite's Celery worker announces itself (``dq:celery``) every 30 s."""
    announcements = global_keys().celery_sides
    return [
        key
        for key in client.scan_iter(count=1000)
        if key not in (announcements, announcements.encode())
    ]


def snapshot(raw: redis.Redis) -> Snapshot:
    """Every key of the database (``keys_of_the_test``): its DUMP and whether it expires."""
    pipe = raw.pipeline(transaction=False)
    keys = sorted(keys_of_the_test(raw))
    for key in keys:
        pipe.dump(key)
        pipe.pttl(key)
    replies = pipe.execute()
    return {key: (replies[2 * i], replies[2 * i + 1] >= 0) for i, key in enumerate(keys)}


def snapshot_diff(before: Snapshot, after: Snapshot) -> list[str]:
    """What changed between two snapshots, one line per key."""
    changes = []
    for key in sorted(set(before) | set(after)):
        if key not in after:
            changes.append(f"removed {key!r}")
        elif key not in before:
            changes.append(f"added {key!r}")
        elif before[key] != after[key]:
            changes.append(f"changed {key!r}")
    return changes


@dataclass
class Message:
    """One task message the delay worker published, decoded as a Celery worker decodes it."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    headers: dict[str, Any]

    @property
    def dispatch(self) -> tuple[str, str, str]:
        h = self.headers
        return str(h.get("dq_queue")), str(h.get("dq_id")), str(h.get("dq_token"))


def decode_message(payload: bytes) -> Message:
    """Decode kombu's Redis envelope and task protocol 2 body, with kombu's json."""
    envelope = kombu_loads(payload)
    body = envelope["body"]
    if envelope.get("properties", {}).get("body_encoding") == "base64":
        body = base64.b64decode(body)
    args, kwargs, _embed = kombu_loads(body)
    headers = envelope.get("headers") or {}
    return Message(str(headers.get("task")), list(args), dict(kwargs), dict(headers))


def take_messages(broker: redis.Redis | None = None) -> list[bytes]:
    """Every message on the parked broker's default list, oldest first; the list emptied."""
    broker = broker or parked_broker()
    pipe = broker.pipeline(transaction=True)
    pipe.lrange(BROKER_QUEUE, 0, -1)
    pipe.delete(BROKER_QUEUE)
    payloads, _ = pipe.execute()
    return list(reversed(payloads))  # LPUSHed: the oldest is last


class TaskRaised(Exception):
    """The task function itself raised (as opposed to delayqueue's bookkeeping)."""


def run_like_celery(message: Message, tasks: dict[str, Any]) -> str:
    """Run one dispatch through ``delayqueue.celery.run_job`` as the Celery side does:
    "ran", "raised" (the task's own exception, recorded by delayqueue) or "stale"."""
    name, args, kwargs = message.task, message.args, message.kwargs
    if name == RUN_TASK:
        name, args, kwargs = args[0], args[1], args[2]
    target = tasks[name]
    called: list[bool] = []

    def call(*a: Any, **k: Any) -> Any:
        called.append(True)
        try:
            return target.run(*a, **k)
        except Exception as exc:
            raise TaskRaised(f"{type(exc).__name__}: {exc}") from exc

    try:
        run_job(call, args, kwargs, message.dispatch, backoff=0)
    except TaskRaised:
        return "raised"
    return "ran" if called else "stale"


def page_url(base: Callable[..., str], name: str, *parts: str | bytes) -> str:
    """An admin URL with arbitrary path parts (quoted; ``reverse`` refuses some of them)."""
    placeholders = [f"PLACEHOLDER{i}" for i in range(len(parts))]
    path = base(name, *placeholders)
    for placeholder, part in zip(placeholders, parts, strict=True):
        raw = part if isinstance(part, bytes) else part.encode("utf-8", "surrogatepass")
        path = path.replace(placeholder, quote(raw, safe=""))
    return path


def is_documented_error(exc: BaseException) -> bool:
    return isinstance(exc, DelayQueueError)


def states_of(raw: redis.Redis, queue_base: str, job_id: bytes) -> list[str]:
    """The zsets of ``queue_base`` ("dq:{Q}") that hold ``job_id``."""
    found = []
    for state in ("scheduled", "inflight", "dead"):
        try:
            if raw.zscore(f"{queue_base}:{state}", job_id) is not None:
                found.append(state)
        except redis.ResponseError:
            pass
    return found


def short(values: Iterable[Any], limit: int = 300) -> str:
    text = ", ".join(repr(v) for v in values)
    return text if len(text) <= limit else text[:limit] + "…"


# Values to plant in a hash's field (None: the field removed), and scores to plant in a
# zset (tests/engine/test_fuzz_stored.py, tests/periodic/test_fuzz_schedules.py,
# tests/tasks_backend/test_fuzz_results.py).
MISSING = None
VALUES: list[bytes | None] = [
    MISSING,
    b"",
    b"x",
    b"nan",
    b"inf",
    b"-inf",
    b"1e300",
    b"-1e300",
    b"9" * 400,
    b"999999999999999",
    b"1e15",
    b"-5",
    b"-1",
    b"0",
    b"1",
    b"1.5",
    b" 1",
    b"0x10",
    NOT_UTF8,
    PICKLE,
    PICKLE_ASCII,
    b"\n\n",
    b"a/b",
    b"[]",
    b"{}",
    b"null",
    b'"s"',
    b"[1,2,3]",
    b'[{"at": 1e400, "attempt": "x"}]',
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b"x" * 200_000,
    b"tests.support.jobs.plain",
    b"os.system",
    b"delayqueue.run_task",
    b"tests.support.jobs.record\n",
    b'[{"__type__": "nope", "__value__": 1}]',  # kombu's JSON type envelope
    b'["x", {"__type__": "bytes", "__value__": "X"}]',
]
SCORES = [1e300, -1e300, YEAR_0_MS, YEAR_MINUS_10000_MS, AFTER_YEAR_9999_MS, 0, -1, 2**63,
          float("inf"), float("-inf"), 0.5, 253_402_300_799_999 - 3_600_000]  # fmt: skip
