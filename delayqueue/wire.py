"""The wire format between delayqueue's sides: the producer and the delay worker (the job's
arguments as JSON, checked strictly on the way in and parsed strictly on the way out: only
JSON ever reaches Redis, and nothing is unpickled), and the delay worker and the Celery side
(delayqueue's task names, the message headers a dispatch carries, a batch message's entries,
what a task declared through ``@delayed_task``).

The delay worker (``worker/``) and the Celery side (``runner``, ``batches``, ``tasks``) both
import this module and neither imports the other; a change of the format is a change here
(and of ``engine/presence.WIRE_PROTOCOL`` when old and new sides cannot talk).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any, Self

from delayqueue.engine.keys import JOB_ID, QUEUE_NAME
from delayqueue.errors import CorruptJob, NotSerializable, PayloadTooLarge

# ---- delayqueue's own Celery tasks ------------------------------------------------------

RUN_TASK = "delayqueue.run_task"  # a plain Celery task's job: [name, args, kwargs]
RUN_BATCH = "delayqueue.run_batch"  # jobs of one task in one message: [queue, task, entries]

# ---- the headers a dispatch carries (Celery shows them as request attributes) -----------

HEADER_QUEUE = "dq_queue"
HEADER_ID = "dq_id"
HEADER_TOKEN = "dq_token"
# When the delay worker claimed the job, and the job's due time when the worker knows it
# (epoch ms, Redis's clock; a batch's: its first job's): for the metrics and logs, and, on a
# pool that runs jobs in the worker's own process, how long the consumer holds a message that
# came ahead of its due time (runner/held.py). A message without them runs at once.
HEADER_CLAIMED = "dq_claimed"
HEADER_DUE = "dq_due"
# The dispatching delay worker's visibility timeout (ms), for jobs that set none of their own:
# begin restarts the deadline from it, so run_delay_worker --visibility-timeout (or its
# VISIBILITY_TIMEOUT) governs the whole run, not the Celery side's setting.
HEADER_VT = "dq_vt"
HEADER_BATCH = "dq_batch"  # on a batch message: its job count (for Flower and logs)
# The job's trace context (integrations/trace_context.py); a batch's: {job id: context}
HEADER_TRACE, HEADER_TRACES = "dq_trace", "dq_traces"


def dispatch_headers(request: Any) -> tuple[str, str, str] | None:
    """(queue, job id, token) when this Celery request is a delayqueue dispatch. A worker
    exposes message headers as request attributes; ``apply(headers=...)`` as ``headers``."""
    fields = {
        name: getattr(request, name, None) for name in (HEADER_QUEUE, HEADER_ID, HEADER_TOKEN)
    }
    if not fields[HEADER_ID]:
        return dispatch_from_headers(getattr(request, "headers", None) or {})
    return str(fields[HEADER_QUEUE]), str(fields[HEADER_ID]), str(fields[HEADER_TOKEN])


def dispatch_from_headers(headers: Any) -> tuple[str, str, str] | None:
    """(queue, job id, token) from a message's headers, or None when they name no dispatch."""
    if not isinstance(headers, dict) or not headers.get(HEADER_ID):
        return None
    return str(headers.get(HEADER_QUEUE)), str(headers[HEADER_ID]), str(headers.get(HEADER_TOKEN))


def header_ms(request: Any, name: str) -> int | None:
    """A time header of the current dispatch (see ``dispatch_headers``), or None."""
    value = getattr(request, name, None)
    if value is None:
        headers = getattr(request, "headers", None)
        value = headers.get(name) if isinstance(headers, dict) else None
    return epoch_ms(value)


def epoch_ms(value: Any) -> int | None:
    """A time header's value (epoch ms, as the delay worker writes it), or None."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 16:
        return int(value)
    return None


def valid_dispatch(queue: str, job_id: str, token: str) -> bool:
    """Whether message headers name a queue, a job id and a fencing token delayqueue could
    have written (a message from elsewhere must not reach Redis as a key or argument)."""
    return (
        QUEUE_NAME.fullmatch(queue) is not None
        and JOB_ID.fullmatch(job_id) is not None
        and token.isascii()
        and token.isdigit()
        and len(token) < 16
    )


# ---- a batch message's entries ----------------------------------------------------------


@dataclass
class BatchEntry:
    """One job of a batch message: ``[id, token, args, kwargs, due ms or None]``."""

    id: str
    token: str
    args: list[Any]
    kwargs: dict[str, Any]
    due_ms: int | None

    @classmethod
    def parse(cls, entry: Any) -> Self | None:
        """The entry, or None when it is not one."""
        if not (isinstance(entry, list | tuple) and len(entry) == 5):
            return None
        job_id, token, args, kwargs, due = entry
        if not (isinstance(job_id, str) and isinstance(token, str)):
            return None
        if not (isinstance(args, list) and isinstance(kwargs, dict)):
            return None
        return cls(job_id, token, args, kwargs, due if isinstance(due, int) else None)

    def entry(self) -> list[Any]:
        return [self.id, self.token, self.args, self.kwargs, self.due_ms]


# ---- what a task declared through @delayed_task -----------------------------------------

DELAYED_MARK = "dq_delayed"  # a class attribute, True on @delayed_task's task class


def is_delayed_task(task: object) -> bool:
    """Whether ``task`` is a ``@delayed_task`` (its messages carry the dispatch headers)."""
    return getattr(task, DELAYED_MARK, False) is True


def declared_queue(task: object) -> str | None:
    queue = getattr(task, "dq_queue", None) if is_delayed_task(task) else None
    return queue if isinstance(queue, str) else None


def declared_priority(task: object) -> str | None:
    """The keyword argument that holds a job's priority, when ``task`` declares one
    (``@delayed_task(dq_priority_kwarg=...)``: an int, higher first among the jobs a delay
    worker dispatches in one pass)."""
    name = getattr(task, "dq_priority_kwarg", None) if is_delayed_task(task) else None
    return name if isinstance(name, str) else None


def declared_batch(task: object) -> int | None:
    batch = getattr(task, "dq_batch", None) if is_delayed_task(task) else None
    return batch if isinstance(batch, int) else None


# ---- job arguments as JSON --------------------------------------------------------------

_SCALARS = (str, int, bool, type(None))
_FLAT = frozenset(_SCALARS)  # exact types: subclasses (enums, ...) take the full check
_STR = frozenset((str,))
_CONTAINERS = (list, tuple, dict)
_PLAIN_SEQUENCES = frozenset((list, tuple))
# One encoder: json.dumps() with options builds a new JSONEncoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# Arguments that are all flat scalars (a few ids: most calls), or that _check passed
# (bounded depth: no cycle), hold nothing to check for cycles, so the C encoder runs
# without the markers, without the Python-level encode() that builds it anew each call.
# (None where there is no C one.)
_CHECKED_ENCODER = (
    c_make_encoder(None, _ENCODER.default, encode_basestring, None, ":", ",", False, False, False)
    if c_make_encoder is not None
    else None
)


# Lists and dicts nested deeper than this are refused at the call: every JSON parser on the
# way (the delay worker's, the Celery worker's kombu) recurses per level, and its stack is
# deeper than the caller's, so the limit must hold whatever the caller's stack depth.
MAX_NESTING = 64


def _check(value: Any, path: str) -> None:
    """Raise NotSerializable unless ``value`` is plain JSON nested at most MAX_NESTING deep.
    Iterative: its result does not depend on the caller's stack depth. Each pending value
    carries the way to it as links (parent, key); the path is written out only for an error."""
    pending: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while pending:
        item, depth, trail = pending.pop()
        if type(item) in _FLAT or isinstance(item, _SCALARS):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise NotSerializable(f"{_path(path, trail)} is {item!r}, which JSON cannot hold")
            continue
        if not isinstance(item, _CONTAINERS):
            raise NotSerializable(
                f"{_path(path, trail)} is a {type(item).__module__}.{type(item).__qualname__}, "
                "which is not JSON; pass ids and plain values (str, int, float, bool, None, "
                "list, dict), not objects"
            )
        if depth >= MAX_NESTING:
            raise NotSerializable(
                f"{_path(path, trail)} is nested more than {MAX_NESTING} lists or dicts deep (or "
                "contains itself); pass flatter data, or store it elsewhere and pass its id"
            )
        if isinstance(item, dict):
            if len(item) == 2 and "__type__" in item and "__value__" in item:
                raise NotSerializable(
                    f"{_path(path, trail)} is a dict of exactly the keys '__type__' and "
                    "'__value__', the envelope in which kombu's JSON carries other types: the "
                    "Celery worker would turn it into another value (b'...', a Decimal) or drop "
                    "the message; rename a key or add another"
                )
            if _STR.issuperset(map(type, item)) and _FLAT.issuperset(map(type, item.values())):
                continue  # (scalars under str keys: done)
            for key, child in item.items():
                if not isinstance(key, str):
                    raise NotSerializable(
                        f"{_path(path, trail)} has the key {key!r} ({type(key).__name__}); JSON "
                        "keys must be str"
                    )
                pending.append((child, depth + 1, (trail, repr(key))))
        elif not _FLAT.issuperset(map(type, item)):  # (a list of scalars: done)
            pending.extend((child, depth + 1, (trail, i)) for i, child in enumerate(item))


def _path(root: str, trail: Any) -> str:
    """``root[...][...]``: the way to a value, from its links (parent, key)."""
    keys = []
    while trail is not None:
        trail, key = trail
        keys.append(f"[{key}]")
    return root + "".join(reversed(keys))


def encode_args(args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int) -> tuple[str, str]:
    """JSON of args and kwargs ("" for no kwargs), or NotSerializable / PayloadTooLarge."""
    flat = type(args) in _PLAIN_SEQUENCES and not kwargs and _FLAT.issuperset(map(type, args))
    if not flat:  # (flat, the common case: only a huge int or a lone surrogate can fail)
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise NotSerializable(f"args must be a list or tuple, not {type(args).__name__}")
        if not isinstance(kwargs, Mapping):
            raise NotSerializable(f"kwargs must be a dict, not {type(kwargs).__name__}")
        _check(list(args), "args")
        _check(dict(kwargs), "kwargs")
    try:
        if _CHECKED_ENCODER is not None:
            args_json = "".join(_CHECKED_ENCODER(list(args), 0))
            kwargs_json = "".join(_CHECKED_ENCODER(dict(kwargs), 0)) if kwargs else ""
        else:
            args_json = _ENCODER.encode(list(args))
            kwargs_json = _ENCODER.encode(dict(kwargs)) if kwargs else ""
        check_size(args_json, kwargs_json, max_bytes)  # (where a lone surrogate fails)
    except PayloadTooLarge:
        raise
    except UnicodeEncodeError as exc:
        raise NotSerializable(
            "arguments hold a str that is not valid Unicode (lone surrogate "
            f"{exc.object[exc.start : exc.end]!r}); JSON in Redis is UTF-8"
        ) from None
    except (ValueError, TypeError, RecursionError) as exc:  # an int of over 4,300 digits, ...
        raise NotSerializable(f"arguments cannot be written as JSON: {exc}") from None
    return args_json, kwargs_json


def check_size(args_json: str, kwargs_json: str, max_bytes: int) -> None:
    """PayloadTooLarge when the arguments' JSON is more than ``max_bytes`` bytes of UTF-8."""
    size = len(args_json.encode()) + len(kwargs_json.encode())
    if size > max_bytes:
        raise PayloadTooLarge(
            f"arguments are {size} bytes of JSON, more than MAX_PAYLOAD_BYTES={max_bytes}; "
            "store the data elsewhere and pass its id"
        )


def decode_args(args_json: str, kwargs_json: str) -> tuple[list[Any], dict[str, Any]]:
    """Parse stored arguments, or CorruptJob when they are not what encode_args writes."""
    try:
        args = json.loads(args_json)
        kwargs = json.loads(kwargs_json) if kwargs_json else {}
    except (TypeError, ValueError, RecursionError) as exc:
        raise CorruptJob(f"arguments are not valid JSON: {exc}") from None
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise CorruptJob("arguments are not a JSON list and object")
    try:
        _check(args, "args")
        _check(kwargs, "kwargs")
    except NotSerializable as exc:  # JSON delayqueue would not have written: nan, too deep
        raise CorruptJob(f"arguments are not what delayqueue writes: {exc}") from None
    return args, kwargs
