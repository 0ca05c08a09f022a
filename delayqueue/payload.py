"""Job arguments as JSON: strict checks on the way in, strict parsing on the way out.

Only JSON ever reaches Redis, and only ``json.loads`` ever reads it back: nothing is unpickled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from delayqueue.errors import CorruptJob, NotSerializable, PayloadTooLarge

_SCALARS = (str, int, bool, type(None))
_FLAT = frozenset(_SCALARS)  # exact types: subclasses (enums, ...) take the full check
_PLAIN_SEQUENCES = frozenset((list, tuple))
# One encoder: json.dumps() with options builds a new JSONEncoder on every call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _check(value: Any, path: str) -> None:
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotSerializable(f"{path} is {value!r}, which JSON cannot hold")
        return
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            _check(item, f"{path}[{i}]")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise NotSerializable(
                    f"{path} has the key {key!r} ({type(key).__name__}); JSON keys must be str"
                )
            _check(item, f"{path}[{key!r}]")
        return
    raise NotSerializable(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which is not JSON; "
        "pass ids and plain values (str, int, float, bool, None, list, dict), not objects"
    )


def encode_args(args: Sequence[Any], kwargs: Mapping[str, Any], max_bytes: int) -> tuple[str, str]:
    """JSON of args and kwargs ("" for no kwargs), or NotSerializable / PayloadTooLarge."""
    if type(args) in _PLAIN_SEQUENCES and not kwargs and all(type(a) in _FLAT for a in args):
        pass  # the common case, a few ids: nothing in it can fail to be JSON
    else:
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise NotSerializable(f"args must be a list or tuple, not {type(args).__name__}")
        if not isinstance(kwargs, Mapping):
            raise NotSerializable(f"kwargs must be a dict, not {type(kwargs).__name__}")
        try:
            _check(list(args), "args")
            _check(dict(kwargs), "kwargs")
        except RecursionError:
            raise NotSerializable(
                "arguments are nested too deeply for JSON, or a list or dict contains itself"
            ) from None
    args_json = _ENCODER.encode(list(args))
    kwargs_json = _ENCODER.encode(dict(kwargs)) if kwargs else ""
    try:
        size = len(args_json.encode()) + len(kwargs_json.encode())
    except UnicodeEncodeError as exc:
        raise NotSerializable(
            "arguments hold a str that is not valid Unicode (lone surrogate "
            f"{exc.object[exc.start : exc.end]!r}); JSON in Redis is UTF-8"
        ) from None
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
    except (TypeError, ValueError) as exc:
        raise CorruptJob(f"arguments are not valid JSON: {exc}") from exc
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise CorruptJob("arguments are not a JSON list and object")
    return args, kwargs
