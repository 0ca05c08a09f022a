"""Redis Sentinel is configured as kombu configures Celery's broker: ``REDIS_URL`` lists the
sentinels, ``sentinel://[user:password@]host[:26379][/db];sentinel://host2...``, the URL's
credentials and database are the master's, ``SENTINEL_MASTER`` is kombu's ``master_name``
and ``SENTINEL_KWARGS`` its ``sentinel_kwargs`` (options of the connections to the sentinels,
their password say). The client is redis-py's ``Sentinel.master_for``: each new connection
asks the sentinels where the master is, and a connection that finds the server it talks to
demoted (READONLY) drops itself, so the next one goes to the new master."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis import Redis
from redis.backoff import NoBackoff
from redis.connection import parse_url, to_bool
from redis.retry import Retry
from redis.sentinel import Sentinel

from delayqueue.errors import InvalidOption
from delayqueue.redaction import redact_url
from delayqueue.validators import check_sentinel_kwargs

SENTINEL_SCHEME = "sentinel"
SENTINEL_PORT = 26379  # kombu's default for a sentinel:// URL without a port


def is_sentinel_url(url: object) -> bool:
    return str(url).partition("://")[0].strip().lower() == SENTINEL_SCHEME


@dataclass(frozen=True)
class SentinelTarget:
    """What a ``sentinel://`` URL says: the sentinels' addresses, and the options of the
    connections to the master (``db``, ``username``, ``password``, query parameters)."""

    sentinels: list[tuple[str, int]]
    options: dict[str, Any] = field(default_factory=dict)


def parse_sentinel_url(url: str) -> SentinelTarget:
    """kombu's form: one ``sentinel://[user:password@]host[:port][/db][?option=value]`` per
    sentinel, joined by ``;``. As kombu (Celery's broker) does, the credentials, database and
    options are the first part's; a later part may repeat them but not say otherwise (kombu
    would ignore it, and the same URL would mean another database to Celery). A part that
    names no host is refused too. InvalidOption, with the URL redacted, for anything
    unusable."""
    sentinels: list[tuple[str, int]] = []
    options: dict[str, Any] = {}
    for part in str(url).split(";"):
        part = part.strip()
        if not part:
            continue  # "a;b;" or "a;;b"
        shown = redact_url(part)
        scheme, sep, rest = part.partition("://")
        if not sep or scheme.lower() != SENTINEL_SCHEME:
            raise InvalidOption(
                f"REDIS_URL part {shown} is not a sentinel:// URL (a Sentinel REDIS_URL lists "
                "one sentinel://host:port per sentinel, joined by ';')"
            )
        host, port, found = _sentinel_part(rest, shown)
        if not sentinels:
            options = found
        else:
            for name, value in found.items():
                if options.get(name, 0 if name == "db" else None) != value:
                    raise InvalidOption(
                        f"REDIS_URL part {shown} sets {name!r} otherwise than the first part; "
                        "kombu (Celery's broker) reads the credentials, database and options "
                        "of the first sentinel:// part only: write them there"
                    )
        sentinels.append((host, port))
    if not sentinels:
        raise InvalidOption(f"REDIS_URL {redact_url(str(url))} names no sentinel")
    return SentinelTarget(sentinels, options)


def _sentinel_part(rest: str, shown: str) -> tuple[str, int, dict[str, Any]]:
    """(host, port, master connection options) of one part after its ``sentinel://``."""
    try:
        port = urlsplit(f"redis://{rest}").port
        found = parse_url(f"redis://{rest}")
    except ValueError as exc:
        raise InvalidOption(f"REDIS_URL part {shown} is not usable: {exc}") from None
    host = found.pop("host", None)
    if not host:
        raise InvalidOption(f"REDIS_URL part {shown} names no sentinel host")
    if port == 0:
        raise InvalidOption(f"REDIS_URL part {shown} has port 0")
    found.pop("port", None)
    path = unquote(urlsplit(f"redis://{rest}").path).strip("/")
    if path and "db" not in found:
        if not path.isdigit():
            raise InvalidOption(f"REDIS_URL part {shown}: the database must be a number")
        found["db"] = int(path)
    if "ssl" in found:  # a string in the URL; "false" must not turn TLS on
        found["ssl"] = bool(to_bool(found["ssl"]))
    return host, port or SENTINEL_PORT, found


class SentinelRedis(Redis):
    """A client of the master the sentinels name (``Sentinel.master_for``) whose ``close()``
    also closes its connections to the sentinels."""

    sentinel_manager: Sentinel | None = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            sentinel, self.sentinel_manager = self.sentinel_manager, None
            if sentinel is not None:
                _close_sentinels(sentinel)


def _close_sentinels(sentinel: Sentinel) -> None:
    """``Sentinel.close()``; redis-py before 5.1 has none: its sentinel clients one by one."""
    close = getattr(sentinel, "close", None)
    if close is not None:
        close()
        return
    for client in sentinel.sentinels:
        client.close()


def sentinel_client(
    url: str,
    master: str | None,
    sentinel_kwargs: Mapping[str, Any] | None,
    options: dict[str, Any],
) -> Redis:
    target = parse_sentinel_url(url)
    if not isinstance(master, str) or not master.strip():
        raise InvalidOption(
            f"REDIS_URL {redact_url(str(url))} is a Sentinel URL: DELAYQUEUE['SENTINEL_MASTER'] "
            "must name the master the sentinels monitor"
        )
    if sentinel_kwargs is not None and not isinstance(sentinel_kwargs, Mapping):
        raise InvalidOption("DELAYQUEUE['SENTINEL_KWARGS'] must be a dict of redis-py options")
    # The sentinels answer within the same timeouts as the master unless told otherwise, and
    # without redis-py's retries (Redis() retries a refused connection 10 times, for seconds):
    # a sentinel that does not answer is skipped for the next one.
    timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
    to_sentinels = {**timeouts, "retry": Retry(NoBackoff(), 0), **(sentinel_kwargs or {})}
    try:
        sentinel = Sentinel(target.sentinels, sentinel_kwargs=to_sentinels)
    except (TypeError, ValueError) as exc:
        raise InvalidOption(f"DELAYQUEUE['SENTINEL_KWARGS'] is not usable: {exc}") from None
    try:
        # the URL's own options win, as Redis.from_url lets them
        client: SentinelRedis = sentinel.master_for(
            master, redis_class=SentinelRedis, **{**options, **target.options}
        )
        client.sentinel_manager = sentinel
        client.connection_pool.make_connection()  # builds it without connecting
    except (TypeError, ValueError) as exc:
        _close_sentinels(sentinel)
        raise InvalidOption(f"REDIS_URL {redact_url(str(url))} is not usable: {exc}") from None
    return client


def check_sentinel_client(kwargs: Any) -> None:
    """Raise InvalidOption, TypeError or ValueError unless ``kwargs`` (SENTINEL_KWARGS) make
    a client for the sentinels themselves; nothing connects."""
    redis.Redis(**check_sentinel_kwargs(kwargs)).close()
