"""One validator per option, shared by ``@delayed_task``, ``spec()``, the system checks and
the command-line flags, so a value is accepted or refused the same way wherever it is given.

Each returns the value in the form delayqueue stores, or raises InvalidOption (or InvalidKey)
with a message that names the option and its bounds.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from delayqueue.errors import InvalidKey, InvalidOption

MAX_ATTEMPTS_LIMIT = 1000
# A visibility timeout below 0.1 s re-dispatches a job faster than Celery can start it; above
# seven days a crashed run waits a week to be retried.
VISIBILITY_TIMEOUT_MIN = 0.1
VISIBILITY_TIMEOUT_MAX = 7 * 24 * 3600.0
BACKOFF_MAX_SECONDS = 30 * 24 * 3600.0
KEY_MAX_CHARS = 200


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOption(f"{name} must be a number, not {type(value).__name__} {shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidOption(f"{name} must be a finite number, not {shown(value)}")
    return number


def check_max_attempts(value: Any, name: str = "max_attempts") -> int:
    """A positive int, at most MAX_ATTEMPTS_LIMIT."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOption(f"{name} must be an int, not {type(value).__name__} {shown(value)}")
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidOption(
            f"{name} must be between 1 and {MAX_ATTEMPTS_LIMIT}, not {shown(value)}"
        )
    return int(value)


def check_visibility_timeout(value: Any, name: str = "visibility_timeout") -> float:
    """Seconds, between VISIBILITY_TIMEOUT_MIN and VISIBILITY_TIMEOUT_MAX."""
    seconds = _number(name, value)
    if not VISIBILITY_TIMEOUT_MIN <= seconds <= VISIBILITY_TIMEOUT_MAX:
        raise InvalidOption(
            f"{name} must be between {VISIBILITY_TIMEOUT_MIN} and {VISIBILITY_TIMEOUT_MAX:.0f} "
            f"seconds, not {shown(value)}"
        )
    return seconds


def check_positive(value: Any, name: str, *, maximum: float = math.inf) -> float:
    """A finite number above 0 and at most ``maximum``."""
    number = _number(name, value)
    if not 0 < number <= maximum:
        bound = "" if maximum == math.inf else f" and at most {maximum:g}"
        raise InvalidOption(f"{name} must be above 0{bound}, not {shown(value)}")
    return number


MAX_DISPATCH_AHEAD = 1.0  # seconds (claim.lua's MAX_AHEAD_MS)


def check_dispatch_ahead(value: Any, name: str = "dispatch_ahead") -> float:
    """Seconds from 0 to MAX_DISPATCH_AHEAD."""
    number = _number(name, value)
    if not 0 <= number <= MAX_DISPATCH_AHEAD:
        raise InvalidOption(
            f"{name} must be from 0 to {MAX_DISPATCH_AHEAD:g} seconds, not {shown(value)}"
        )
    return number


def check_positive_int(value: Any, name: str, *, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOption(f"{name} must be a positive int, not {shown(value)}")
    if maximum is not None and value > maximum:
        raise InvalidOption(f"{name} must be at most {maximum}, not {shown(value)}")
    return value


def check_backoff(value: Any, name: str = "backoff") -> float | Callable[[int], float] | None:
    """None, seconds (0 to 30 days), or a callable attempt -> seconds."""
    if value is None or callable(value):
        return value
    seconds = _number(name, value)
    if not 0 <= seconds <= BACKOFF_MAX_SECONDS:
        raise InvalidOption(
            f"{name} must be 0 to {BACKOFF_MAX_SECONDS:.0f} seconds, not {shown(value)}"
        )
    return seconds


def check_on_conflict(value: Any) -> str:
    if value not in ("keep", "replace") or not isinstance(value, str):
        raise InvalidOption(f"on_conflict must be 'keep' or 'replace', not {shown(value)}")
    return value


def check_key(value: Any, name: str = "key") -> str:
    """A dedupe key: a non-empty str of valid Unicode (it is stored as UTF-8), at most
    KEY_MAX_CHARS characters."""
    if not isinstance(value, str) or not 0 < len(value) <= KEY_MAX_CHARS:
        raise InvalidKey(
            f"{name} must be a non-empty str of at most {KEY_MAX_CHARS} characters, "
            f"not {shown(value)}"
        )
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        raise InvalidKey(
            f"{name} {shown(value)} is not valid Unicode (lone surrogate "
            f"{exc.object[exc.start : exc.end]!r}); keys are stored as UTF-8"
        ) from None
    return value


MAX_LIMIT = 1_000_000_000  # the most starts per window or jobs at once (lua/_limits.lua)
MAX_EXPIRES_SECONDS = 100 * 365 * 24 * 3600.0
_RATE = re.compile(r"([0-9]{1,10})/([smh])")


def check_rate(value: Any, name: str = "rate") -> tuple[int, int]:
    """ "N/s", "N/m" or "N/h" (N from 1 to MAX_LIMIT) as (N, the window in ms)."""
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None or not 1 <= int(match.group(1)) <= MAX_LIMIT:
        raise InvalidOption(
            f"{name} must be a string 'N/s', 'N/m' or 'N/h' (N starts per second, minute or "
            f"hour, 1 to {MAX_LIMIT:,}), not {shown(value)}"
        )
    return int(match.group(1)), {"s": 1_000, "m": 60_000, "h": 3_600_000}[match.group(2)]


def check_concurrency(value: Any, name: str = "concurrency") -> int:
    """Jobs running at once: an int from 1 to MAX_LIMIT."""
    return check_positive_int(value, name, maximum=MAX_LIMIT)


def check_expires(value: Any, name: str = "expires") -> int:
    """Seconds (a number or a timedelta) above 0 and at most 100 years, as whole ms (a
    fraction of a ms rounds up: never sooner than asked)."""
    seconds = value.total_seconds() if isinstance(value, timedelta) else _number(name, value)
    if not 0 < seconds <= MAX_EXPIRES_SECONDS:
        raise InvalidOption(
            f"{name} must be seconds (or a timedelta) above 0 and at most 100 years after the "
            f"due time, not {shown(value)}"
        )
    return math.ceil(seconds * 1000)


def check_limit_key(value: Any, name: str = "limit_key") -> str:
    """A limit key: as a dedupe key, a non-empty str of at most KEY_MAX_CHARS characters."""
    try:
        return check_key(value, name)
    except InvalidKey as exc:
        raise InvalidOption(str(exc)) from None


def shown(value: Any) -> str:
    """``repr(value)`` fit for an error message: short, and never itself an error (an int
    of over 4,300 digits, an object whose ``__repr__`` raises)."""
    try:
        text = repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"an int of {len(format(value, 'x')) * 4 * 0.30103:.0f} digits"
        text = f"<{type(value).__qualname__}>"
    except Exception:
        text = f"<{type(value).__qualname__}>"
    return text if len(text) <= 80 else f"{text[:77]}..."


CLAIM_SIZE_MAX = 10_000


def check_flag(value: Any, name: str) -> bool:
    """True or False, nothing else (a string "false" would be true)."""
    if not isinstance(value, bool):
        raise InvalidOption(
            f"{name} must be True or False, not {type(value).__name__} {shown(value)}"
        )
    return value


SHARD_SEPARATOR = "~"  # not a character of queue names: "orders~3" is a shard of "orders"
MAX_SHARDS = 1024


def check_shards(value: Any, name: str = "shards") -> int:
    """An int from 1 to MAX_SHARDS."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARDS:
        raise InvalidOption(f"{name} must be an integer from 1 to {MAX_SHARDS}, not {shown(value)}")
    return value


def check_shard_map(value: Any, name: str = "SHARDS") -> dict[str, int] | None:
    """None, or a dict of queue name -> shards (1-MAX_SHARDS)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidOption(f"{name} must be a dict of queue name -> shards, not {shown(value)}")
    for queue, count in value.items():
        if not isinstance(queue, str) or not queue or SHARD_SEPARATOR in queue:
            raise InvalidOption(f"{name}: {shown(queue)} is not a queue name")
        check_shards(count, f"{name}[{queue!r}]")
    return value


def check_claim_size(value: Any, name: str = "claim_size") -> int:
    return check_positive_int(value, name, maximum=CLAIM_SIZE_MAX)


def check_jitter(value: Any, name: str = "BACKOFF_JITTER") -> float:
    share = _number(name, value)
    if not 0 <= share <= 1:
        raise InvalidOption(f"{name} must be a share from 0 to 1, not {shown(value)}")
    return share


def check_sentinel_master(value: Any, name: str = "SENTINEL_MASTER") -> str:
    """The name the sentinels monitor the master under (one word, as in ``sentinel monitor
    <name> host port quorum``)."""
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise InvalidOption(
            f"{name} must name the master the sentinels monitor (a string such as "
            f"'mymaster'), not {shown(value)}"
        )
    return value


def check_sentinel_kwargs(value: Any, name: str = "SENTINEL_KWARGS") -> dict[str, Any]:
    """redis-py options of the connections to the sentinels, or None for none. The value is
    never shown: it may hold a password."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidOption(
            f"{name} must be a dict of redis-py connection options for the sentinels, "
            f"not {type(value).__name__}"
        )
    bad = [key for key in value if not isinstance(key, str) or not key.isidentifier()]
    if bad:
        raise InvalidOption(f"{name} keys must be option names, not {shown(bad[0])}")
    return dict(value)


# The numeric settings of DELAYQUEUE and the validator each goes through (delayqueue.E004).
SETTING_VALIDATORS: dict[str, Callable[[Any], object]] = {
    "CLAIM_SIZE": lambda v: check_claim_size(v, "CLAIM_SIZE"),
    "VISIBILITY_TIMEOUT": lambda v: check_visibility_timeout(v, "VISIBILITY_TIMEOUT"),
    "MAX_ATTEMPTS": lambda v: check_max_attempts(v, "MAX_ATTEMPTS"),
    "BACKOFF_BASE": lambda v: check_backoff(_number("BACKOFF_BASE", v), "BACKOFF_BASE"),
    "BACKOFF_MAX": lambda v: check_backoff(_number("BACKOFF_MAX", v), "BACKOFF_MAX"),
    "BACKOFF_JITTER": check_jitter,
    "MAX_DELAY": lambda v: check_positive(v, "MAX_DELAY", maximum=100 * 365 * 24 * 3600),
    "MAX_PAYLOAD_BYTES": lambda v: check_positive_int(v, "MAX_PAYLOAD_BYTES", maximum=16 << 20),
    "SAFETY_POLL": lambda v: check_positive(v, "SAFETY_POLL"),
    "DISPATCH_AHEAD": lambda v: check_dispatch_ahead(v, "DISPATCH_AHEAD"),
    "SOCKET_TIMEOUT": lambda v: check_positive(v, "SOCKET_TIMEOUT", maximum=3600),
    "DEAD_MAX": lambda v: check_positive_int(v, "DEAD_MAX", maximum=100_000_000),
    "REDIS_CLUSTER": lambda v: check_flag(v, "REDIS_CLUSTER"),
    "DURABLE": lambda v: check_flag(v, "DURABLE"),
    "SHARDS": check_shard_map,
    "DURABLE_REPLICAS": lambda v: check_positive_int(v, "DURABLE_REPLICAS", maximum=16),
    "DURABLE_TIMEOUT": lambda v: check_positive(v, "DURABLE_TIMEOUT", maximum=60),
}
