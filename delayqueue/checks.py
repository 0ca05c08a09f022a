"""System checks (``python manage.py check``), one registered function per concern. Ids are
listed in docs/settings.md. Values are checked with the same validators the API and the command
line use (validators.py)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from delayqueue.conf import DEFAULTS, RENAMED, WAKE_HORIZON_MS, renamed, with_fallbacks
from delayqueue.engine.clients import check_cluster_url, client_from_url
from delayqueue.engine.sentinel import (
    check_sentinel_client,
    is_sentinel_url,
    parse_sentinel_url,
)
from delayqueue.errors import InvalidOption
from delayqueue.redaction import redact_url
from delayqueue.validators import (
    SETTING_VALIDATORS,
    check_sentinel_master,
)

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")


def _given() -> dict[str, Any] | None:
    """``settings.DELAYQUEUE`` over the defaults, or None when it is not a dict (E001)."""
    user = getattr(settings, "DELAYQUEUE", {})
    if not isinstance(user, dict):
        return None
    return {**DEFAULTS, **renamed(user)}


@register()
def check_is_a_dict(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    if _given() is not None:
        return []
    return [
        Error(
            "DELAYQUEUE must be a dict.",
            hint="DELAYQUEUE = {'REDIS_URL': ...}",
            id="delayqueue.E001",
        )
    ]


@register()
def check_known_names(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(settings, "DELAYQUEUE", {})
    if not isinstance(user, dict):
        return []
    found: list[CheckMessage] = [
        Warning(
            f"DELAYQUEUE[{old!r}] is renamed {RENAMED[old]!r}.",
            hint=f"Write {RENAMED[old]!r}; the old name stops working in the next release.",
            id="delayqueue.W004",
        )
        for old in sorted(RENAMED.keys() & user.keys())
    ]
    unknown = sorted(set(user) - set(DEFAULTS) - set(RENAMED), key=str)
    if unknown:
        found.append(
            Error(
                f"DELAYQUEUE has unknown settings: {', '.join(map(str, unknown))}.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="delayqueue.E002",
            )
        )
    return found


@register()
def check_redis_url(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    if config is None:
        return []
    url = config["REDIS_URL"] or getattr(settings, "CELERY_BROKER_URL", None)
    if url is None:
        return [
            Warning(
                "Neither DELAYQUEUE['REDIS_URL'] nor CELERY_BROKER_URL is set; delayqueue will "
                "use redis://127.0.0.1:6379/0.",
                hint="Set DELAYQUEUE = {'REDIS_URL': env('REDIS_URL')}.",
                id="delayqueue.W001",
            )
        ]
    if not str(url).startswith(REDIS_SCHEMES) and not is_sentinel_url(url):
        return [
            Error(
                f"DELAYQUEUE['REDIS_URL'] {redact_url(str(url))!r} is not a Redis URL.",
                hint="Use redis://host:port/db, rediss:// for TLS, unix:///path, or "
                "sentinel://host:26379;sentinel://host2:26379/db for Redis Sentinel.",
                id="delayqueue.E003",
            )
        ]
    if config["REDIS_CLUSTER"] is True:
        return _cluster_url_errors(str(url))
    sentinel = _sentinel_settings(config)
    if sentinel is not None and not _sentinel_usable(str(url), sentinel):
        return []  # E008-E010 say what is wrong
    try:
        client_from_url(str(url), **(sentinel or {})).close()
    except InvalidOption as exc:
        return [
            Error(
                f"DELAYQUEUE['REDIS_URL']: {exc}.",
                hint="Query parameters are redis-py's connection options "
                "(socket_timeout, ssl_ca_certs, ...); see redis.Redis.from_url.",
                id="delayqueue.E007",
            )
        ]
    return []


def _cluster_url_errors(url: str) -> list[CheckMessage]:
    """With REDIS_CLUSTER: the URL must name a node (checked without connecting)."""
    try:
        if is_sentinel_url(url):
            raise InvalidOption(
                "a sentinel:// URL with REDIS_CLUSTER: a Redis Cluster fails over by itself"
            )
        check_cluster_url(url)
    except InvalidOption as exc:
        return [
            Error(
                f"DELAYQUEUE['REDIS_URL']: {exc}.",
                hint="With REDIS_CLUSTER, REDIS_URL names any node of the cluster: "
                "redis://host:port/0 (rediss:// for TLS); the client finds the others.",
                id="delayqueue.E011",
            )
        ]
    return []


@register()
def check_numbers(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    if config is None:
        return []
    messages: list[CheckMessage] = []
    for name, validate in SETTING_VALIDATORS.items():
        try:
            validate(config[name])
        except InvalidOption as exc:
            messages.append(
                Error(
                    f"DELAYQUEUE['{name}']: {exc}.",
                    hint=f"The default is {DEFAULTS[name]!r}.",
                    id="delayqueue.E004",
                )
            )
    return messages


@register()
def check_dispatch_mode(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    if config is None or config["DISPATCH_MODE"] in ("auto", "send_task"):
        return []
    return [
        Error(
            f"DELAYQUEUE['DISPATCH_MODE'] must be 'auto' or 'send_task', not "
            f"{config['DISPATCH_MODE']!r}.",
            hint="'auto' writes Celery messages straight to a Redis broker; "
            "'send_task' always goes through Celery.",
            id="delayqueue.E005",
        )
    ]


@register()
def check_sleep_and_visibility(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    if config is None:
        return []
    safety, vt = config["SAFETY_POLL"], config["VISIBILITY_TIMEOUT"]
    numbers = all(
        isinstance(value, int | float) and not isinstance(value, bool) for value in (safety, vt)
    )
    if not numbers:
        return []  # E004 says so
    messages: list[CheckMessage] = []
    if safety * 1000 > WAKE_HORIZON_MS:
        messages.append(
            Error(
                f"DELAYQUEUE['SAFETY_POLL'] must be at most {WAKE_HORIZON_MS // 1000} seconds, "
                f"not {safety!r}.",
                hint="A new job due sooner than the worker's next look wakes it through the "
                "queue's channel only when it is due within that horizon.",
                id="delayqueue.E006",
            )
        )
    if vt <= safety:
        messages.append(
            Warning(
                "DELAYQUEUE['VISIBILITY_TIMEOUT'] is not longer than SAFETY_POLL; "
                "jobs may run twice.",
                hint="Make VISIBILITY_TIMEOUT longer than your slowest task.",
                id="delayqueue.W002",
            )
        )
    return messages


# ---- Redis Sentinel ------------------------------------------------------------------------


def _sentinel_settings(config: dict[str, Any]) -> dict[str, Any] | None:
    """The effective Sentinel settings (with Celery's broker options as fallbacks) when the
    effective REDIS_URL is a sentinel:// URL; None otherwise."""
    effective = with_fallbacks(config)
    if not is_sentinel_url(effective["REDIS_URL"]):
        return None
    return {
        "sentinel_master": effective["SENTINEL_MASTER"],
        "sentinel_kwargs": effective["SENTINEL_KWARGS"],
    }


def _sentinel_usable(url: str, sentinel: dict[str, Any]) -> bool:
    try:
        parse_sentinel_url(url)
        check_sentinel_master(sentinel["sentinel_master"])
        check_sentinel_client(sentinel["sentinel_kwargs"])
    except (InvalidOption, TypeError, ValueError):
        return False
    return True


@register()
def check_sentinel_master_name(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    sentinel = _sentinel_settings(config) if config is not None else None
    if sentinel is None:
        return []
    try:
        check_sentinel_master(sentinel["sentinel_master"])
    except InvalidOption as exc:
        return [
            Error(
                f"DELAYQUEUE['REDIS_URL'] is a Sentinel URL and {exc}.",
                hint="Set DELAYQUEUE['SENTINEL_MASTER'] to the name in the sentinels' "
                "'sentinel monitor <name> ...' line (kombu's master_name).",
                id="delayqueue.E008",
            )
        ]
    return []


@register()
def check_sentinel_url(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    if config is None:
        return []
    url = with_fallbacks(config)["REDIS_URL"]
    if not is_sentinel_url(url):
        return []
    try:
        parse_sentinel_url(str(url))
    except InvalidOption as exc:
        return [
            Error(
                f"DELAYQUEUE['REDIS_URL']: {exc}.",
                hint="One sentinel://[:password@]host[:26379] per sentinel, joined by ';', "
                "the database once at the end: sentinel://h1:26379;sentinel://h2:26379/0.",
                id="delayqueue.E009",
            )
        ]
    return []


@register()
def check_sentinel_options(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    sentinel = _sentinel_settings(config) if config is not None else None
    if sentinel is None:
        return []
    try:
        check_sentinel_client(sentinel["sentinel_kwargs"])  # an unknown option: TypeError
    except (InvalidOption, TypeError, ValueError) as exc:
        return [
            Error(
                f"DELAYQUEUE['SENTINEL_KWARGS'] is not usable: {exc}.",
                hint="redis-py connection options for the sentinels themselves, e.g. "
                "{'password': ..., 'socket_timeout': 1} (kombu's sentinel_kwargs).",
                id="delayqueue.E010",
            )
        ]
    return []


@register()
def check_sentinel_settings_used(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    config = _given()
    if config is None or _sentinel_settings(config) is not None:
        return []
    given = [name for name in ("SENTINEL_MASTER", "SENTINEL_KWARGS") if config[name] is not None]
    if not given:
        return []
    return [
        Warning(
            f"DELAYQUEUE sets {' and '.join(given)} but REDIS_URL is not a sentinel:// URL; "
            "they are ignored.",
            hint="For Redis Sentinel: REDIS_URL = 'sentinel://h1:26379;sentinel://h2:26379/0'.",
            id="delayqueue.W003",
        )
    ]


@register()
def check_celery_app(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The Celery app delayqueue dispatches with can run delayqueue's messages: it can be
    imported, accepts JSON, and has delayqueue's own tasks (run_task, run_batch)."""
    from delayqueue import tasks
    from delayqueue.celery_app import get_celery_app

    try:
        app = get_celery_app()
    except Exception as exc:
        return [
            Error(
                f"The Celery app delayqueue dispatches with cannot be imported: {exc}",
                hint="DELAYQUEUE['CELERY_APP'] is 'module:attribute' of your Celery app "
                "(e.g. 'proj.celery:app'), or leave it unset to use the current app.",
                id="delayqueue.E012",
            )
        ]
    problems: list[CheckMessage] = []
    accepted = {str(kind).lower() for kind in app.conf.accept_content or ()}
    if accepted and not accepted & {"json", "application/json"}:
        problems.append(
            Error(
                f"The Celery app {app.main or app!r} does not accept JSON messages "
                f"(accept_content={sorted(accepted)}): its workers discard every message "
                "delayqueue sends.",
                hint="Add 'json' to CELERY_ACCEPT_CONTENT (accept_content); delayqueue sends "
                "JSON only, never pickle.",
                id="delayqueue.E013",
            )
        )
    missing = [name for name in (tasks.RUN_TASK, tasks.RUN_BATCH) if name not in app.tasks]
    if missing:
        problems.append(
            Error(
                f"The Celery app {app.main or app!r} lacks delayqueue's own tasks {missing}: "
                "its workers would discard batched and plain-task jobs.",
                hint="Import delayqueue.tasks in the module that makes the Celery app, or "
                "keep 'delayqueue' in INSTALLED_APPS with Celery's Django set-up "
                "(app.config_from_object('django.conf:settings', namespace='CELERY')).",
                id="delayqueue.E014",
            )
        )
    return problems
