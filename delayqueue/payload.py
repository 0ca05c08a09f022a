"""Job arguments as JSON: strict checks on the way in, strict parsing on the way out.

Only JSON ever reaches Redis, and only ``json.loads`` ever reads it back: nothing is unpickled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
from typing import Any

from delayqueue.errors import CorruptJob, NotSerializable, PayloadTooLarge

_SCALARS = (str, int, bool, type(None))
_FLAT = frozenset(_SCALARS)  # exact types: subclasses (enums, ...) take the full check
_PLAIN_SEQUENCES = frozenset((list, tuple))
# One encoder: json.dumps() with options builds a new JSONEncoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# Arguments that are all flat scalars (a few ids: most calls) hold nothing to check for
# cycles, so the C encoder runs without the markers, without the Python-level encode()
# that builds it anew each call: 0.6 µs instead of 1.7. (None where there is no C one.)
_FLAT_ENCODER = (
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
    Iterative: its result does not depend on the caller's stack depth."""
    pending: list[tuple[Any, str, int]] = [(value, path, 0)]
    while pending:
        item, where, depth = pending.pop()
        if isinstance(item, _SCALARS):
            continue
        if isinstance(item, float):
            if not math.isfinite(item):
                raise NotSerializable(f"{where} is {item!r}, which JSON cannot hold")
            continue
        if not isinstance(item, list | tuple | dict):
            raise NotSerializable(
                f"{where} is a {type(item).__module__}.{type(item).__qualname__}, which is not "
                "JSON; pass ids and plain values (str, int, float, bool, None, list, dict), "
                "not objects"
            )
        if depth >= MAX_NESTING:
            raise NotSerializable(
                f"{where} is nested more than {MAX_NESTING} lists or dicts deep (or contains "
                "itself); pass flatter data, or store it elsewhere and pass its id"
            )
        if isinstance(item, dict):
            if len(item) == 2 and "__type__" in item and "__value__" in item:
                raise NotSerializable(
                    f"{where} is a dict of exactly the keys '__type__' and '__value__', the "
                    "envelope in which kombu's JSON carries other types: the Celery worker "
                    "would turn it into another value (b'...', a Decimal) or drop the message; "
                    "rename a key or add another"
                )
            for key, child in item.items():
                if not isinstance(key, str):
                    raise NotSerializable(
                        f"{where} has the key {key!r} ({type(key).__name__}); JSON keys must be str"
                    )
                pending.append((child, f"{where}[{key!r}]", depth + 1))
        else:
            pending.extend((child, f"{where}[{i}]", depth + 1) for i, child in enumerate(item))


def encode_args(args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int) -> tuple[str, str]:
    """JSON of args and kwargs ("" for no kwargs), or NotSerializable / PayloadTooLarge."""
    flat = type(args) in _PLAIN_SEQUENCES and not kwargs and all(type(a) in _FLAT for a in args)
    if not flat:  # (flat, the common case: only a huge int or a lone surrogate can fail)
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise NotSerializable(f"args must be a list or tuple, not {type(args).__name__}")
        if not isinstance(kwargs, Mapping):
            raise NotSerializable(f"kwargs must be a dict, not {type(kwargs).__name__}")
        _check(list(args), "args")
        _check(dict(kwargs), "kwargs")
    try:
        if flat and _FLAT_ENCODER is not None:
            args_json, kwargs_json = "".join(_FLAT_ENCODER(list(args), 0)), ""
        else:
            args_json = _ENCODER.encode(list(args))
            kwargs_json = _ENCODER.encode(dict(kwargs)) if kwargs else ""
        size = len(args_json.encode()) + len(kwargs_json.encode())
    except UnicodeEncodeError as exc:
        raise NotSerializable(
            "arguments hold a str that is not valid Unicode (lone surrogate "
            f"{exc.object[exc.start : exc.end]!r}); JSON in Redis is UTF-8"
        ) from None
    except (ValueError, TypeError, RecursionError) as exc:  # an int of over 4,300 digits, ...
        raise NotSerializable(f"arguments cannot be written as JSON: {exc}") from None
    if size > max_bytes:
        raise PayloadTooLarge(
            f"arguments are {size} bytes of JSON, more than MAX_PAYLOAD_BYTES={max_bytes}; "
            "store the data elsewhere and pass its id"
        )
    return args_json, kwargs_json


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
