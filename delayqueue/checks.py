"""System checks (``python manage.py check``). Ids are listed in the README."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register

from delayqueue.conf import DEFAULTS, WAKE_HORIZON_MS
from delayqueue.engine.clients import client_from_url
from delayqueue.errors import InvalidOption
from delayqueue.validators import SETTING_VALIDATORS


@register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    user = getattr(settings, "DELAYQUEUE", {})
    if not isinstance(user, dict):
        return [
            Error(
                "DELAYQUEUE must be a dict.",
                hint="DELAYQUEUE = {'REDIS_URL': ...}",
                id="delayqueue.E001",
            )
        ]
    unknown = sorted(set(user) - set(DEFAULTS))
    if unknown:
        messages.append(
            Error(
                f"DELAYQUEUE has unknown settings: {', '.join(unknown)}.",
                hint=f"Known settings: {', '.join(sorted(DEFAULTS))}.",
                id="delayqueue.E002",
            )
        )
    config = {**DEFAULTS, **user}
    url = config["REDIS_URL"] or getattr(settings, "CELERY_BROKER_URL", None)
    if url is not None and not str(url).startswith(("redis://", "rediss://", "unix://")):
        messages.append(
            Error(
                f"DELAYQUEUE['REDIS_URL'] {url!r} is not a Redis URL.",
                hint="Use redis://host:port/db, rediss:// for TLS or unix:///path.",
                id="delayqueue.E003",
            )
        )
    if url is not None and not messages_about(messages, "delayqueue.E003"):
        try:
            client_from_url(str(url))
        except InvalidOption as exc:
            messages.append(
                Error(
                    f"DELAYQUEUE['REDIS_URL']: {exc}.",
                    hint="Query parameters are redis-py's connection options "
                    "(socket_timeout, ssl_ca_certs, ...); see redis.Redis.from_url.",
                    id="delayqueue.E007",
                )
            )
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
    if config["DISPATCH_MODE"] not in ("auto", "send_task"):
        messages.append(
            Error(
                f"DELAYQUEUE['DISPATCH_MODE'] must be 'auto' or 'send_task', not "
                f"{config['DISPATCH_MODE']!r}.",
                hint="'auto' writes Celery messages straight to a Redis broker; "
                "'send_task' always goes through Celery.",
                id="delayqueue.E005",
            )
        )
    if config["REDIS_URL"] is None and getattr(settings, "CELERY_BROKER_URL", None) is None:
        messages.append(
            Warning(
                "Neither DELAYQUEUE['REDIS_URL'] nor CELERY_BROKER_URL is set; delayqueue will use "
                "redis://127.0.0.1:6379/0.",
                hint="Set DELAYQUEUE = {'REDIS_URL': env('REDIS_URL')}.",
                id="delayqueue.W001",
            )
        )
    safety = config["SAFETY_POLL"]
    if isinstance(safety, int | float) and safety * 1000 > WAKE_HORIZON_MS:
        messages.append(
            Error(
                f"DELAYQUEUE['SAFETY_POLL'] must be at most {WAKE_HORIZON_MS // 1000} seconds, "
                f"not {safety!r}.",
                hint="A new job due sooner than the worker's next look wakes it through the "
                "queue's channel only when it is due within that horizon.",
                id="delayqueue.E006",
            )
        )
    vt = config["VISIBILITY_TIMEOUT"]
    if isinstance(vt, int | float) and isinstance(safety, int | float) and vt <= safety:
        messages.append(
            Warning(
                "DELAYQUEUE['VISIBILITY_TIMEOUT'] is not longer than SAFETY_POLL; "
                "jobs may run twice.",
                hint="Make VISIBILITY_TIMEOUT longer than your slowest task.",
                id="delayqueue.W002",
            )
        )
    return messages


def messages_about(messages: list[CheckMessage], check_id: str) -> bool:
    return any(message.id == check_id for message in messages)
