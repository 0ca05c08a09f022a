"""Settings: one ``DELAYQUEUE`` dict, read lazily into a frozen ``Settings`` and cached until
settings change. A leaf: this module imports nothing of delayqueue (modules that keep
something built from the settings, like the Redis clients, register their own
``setting_changed`` receivers)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULTS: dict[str, Any] = {
    # Redis holding the delayed jobs. ``None`` falls back to CELERY_BROKER_URL. Redis Sentinel
    # in kombu's form: "sentinel://[:password@]host:26379;sentinel://host2:26379/db".
    "REDIS_URL": None,
    # Sentinel: the name the sentinels monitor the master under (kombu's ``master_name``).
    # ``None`` with a sentinel:// URL falls back to CELERY_BROKER_TRANSPORT_OPTIONS's.
    "SENTINEL_MASTER": None,
    # Sentinel: redis-py options of the connections to the sentinels themselves, e.g.
    # {"password": ...} (kombu's ``sentinel_kwargs``); the URL's password is the master's.
    "SENTINEL_KWARGS": None,
    # Redis Cluster: REDIS_URL names any node ("redis://host:port/0", database 0); the client
    # asks it for the others and for the slot map, and follows the cluster through failovers.
    "REDIS_CLUSTER": False,
    # Every write waits until DURABLE_REPLICAS replicas have it (Redis WAIT), at most
    # DURABLE_TIMEOUT seconds, else NotDurable: a failover then loses no acknowledged write.
    # Per call and per task: durable=True.
    "DURABLE": False,
    "DURABLE_REPLICAS": 1,
    "DURABLE_TIMEOUT": 1.0,
    # Sharded queues, {"orders": 8}: a queue spread over 8 queues "orders~0".."orders~7" (on a
    # cluster, over its masters). Tasks may declare it too: @delayed_task(shards=8).
    "SHARDS": None,
    # Prefix of every key (see engine/keys.py). Change it to share one Redis between projects.
    "KEY_PREFIX": "dq",
    # Queue a task goes to when @delayed_task / enqueue() name none.
    "DEFAULT_QUEUE": "default",
    # Jobs claimed per worker pass (was BATCH_SIZE: "batch" is the jobs of one Celery message).
    "CLAIM_SIZE": 500,
    # Seconds a dispatched job may stay in flight before it is reaped and run again.
    "VISIBILITY_TIMEOUT": 300,
    # Default attempts before a failing job goes to dead.
    "MAX_ATTEMPTS": 5,
    # Retry backoff: base * 2 ** (attempt - 1) seconds, capped, with +-JITTER share of randomness.
    "BACKOFF_BASE": 10.0,
    "BACKOFF_MAX": 3600.0,
    "BACKOFF_JITTER": 0.2,
    # Longest accepted delay, in seconds (a year).
    "MAX_DELAY": 365 * 24 * 3600,
    # Largest accepted JSON payload (args + kwargs), in bytes.
    "MAX_PAYLOAD_BYTES": 64 * 1024,
    # Longest the worker sleeps without a reason to wake, in seconds (at most WAKE_HORIZON).
    "SAFETY_POLL": 5.0,
    # Seconds ahead of its due time a job is claimed and handed to Celery, whose worker begins
    # it and holds it until the due time: the hops (claim, broker, pool) are paid before it,
    # and it starts on time. A job this close to its due time can no longer be cancelled or
    # rescheduled (it is in flight). 0 hands each job over at its due time. At most 1.
    "DISPATCH_AHEAD": 0.05,
    # Seconds a Redis command may take before the caller gets an error instead of a hang.
    "SOCKET_TIMEOUT": 5.0,
    # Dead jobs kept per queue; the oldest are trimmed past this.
    "DEAD_MAX": 100_000,
    # Celery app to dispatch with, as "module:attribute"; None means celery.current_app.
    "CELERY_APP": None,
    # How the worker hands jobs to Celery: "auto" writes send_task's own message straight onto
    # the broker's list when the broker is Redis (one round trip per batch, see
    # worker/publisher_choice.py), and uses send_task otherwise; "send_task" always uses send_task.
    "DISPATCH_MODE": "auto",
    # Periodic jobs declared in settings: {"name": {"task": "app.tasks.report", "cron":
    # "0 6 * * *", "timezone": "Europe/Berlin"}, ...} (docs/periodic-jobs.md).
    "SCHEDULES": None,
    # Sentry cron monitors (docs/tracing.md): True monitors every schedule, False only those
    # declared with monitor=True; the monitors' check-in margin and max runtime, in minutes
    # (None: the visibility timeout, the longest an attempt runs before it is reaped).
    "SENTRY_CRONS": False,
    # What a job scheduled under an active OpenTelemetry span keeps (docs/tracing.md):
    # "context" keeps the active span's context with no span of its own (its attempts are
    # children of the caller's span); "span" makes a PRODUCER "create" span per job and keeps
    # its context (what the messaging conventions draw, but an SDK span costs ~1.5x-2x a
    # delay_for's own work: past the 15 % goal).
    "TRACE_SCHEDULING": "context",
    "SENTRY_CHECKIN_MARGIN": 1,
    "SENTRY_MAX_RUNTIME": None,
    # A Celery process ready for its first job sets the objects of its start aside from the
    # garbage collector's full passes (gc.freeze: delayqueue/tasks.py, docs/design.md).
    # False leaves the collector as Python set it.
    "FREEZE_PROCESS_START": True,
}


# A new earliest job is announced on the queue's wake channel only when it is due within this
# many ms: a worker never sleeps longer (SAFETY_POLL <= this, delayqueue.E006), so it looks at
# the head again before a later job is due, and enqueue.lua spares the head lookup for the
# usual job that is minutes or days away.
WAKE_HORIZON_MS = 60_000


# The Django settings ``get_settings()`` reads: a change to any of them clears its cache.
SETTINGS_READ = ("DELAYQUEUE", "CELERY_BROKER_URL", "CELERY_BROKER_TRANSPORT_OPTIONS")


@dataclass(frozen=True)
class Settings:
    """The effective configuration: DEFAULTS overlaid with settings.DELAYQUEUE (the system
    checks, delayqueue.E001-E010, say what is wrong with a value; this only holds them)."""

    redis_url: str
    sentinel_master: str | None
    sentinel_kwargs: dict[str, Any] | None
    redis_cluster: bool
    durable: bool
    durable_replicas: int
    durable_timeout: float
    shards: dict[str, int] | None
    key_prefix: str
    default_queue: str
    claim_size: int
    visibility_timeout: float
    max_attempts: int
    backoff_base: float
    backoff_max: float
    backoff_jitter: float
    max_delay: float
    max_payload_bytes: int
    safety_poll: float
    dispatch_ahead: float
    socket_timeout: float
    dead_max: int
    celery_app: str | None
    dispatch_mode: str
    schedules: dict[str, Any] | None
    sentry_crons: bool
    trace_scheduling: str
    sentry_checkin_margin: int
    sentry_max_runtime: int | None
    freeze_process_start: bool

    @property
    def visibility_ms(self) -> int:
        return round(float(self.visibility_timeout) * 1000)


# Settings renamed, old name -> new name. The old name keeps working for one release, with a
# DeprecationWarning and the system check delayqueue.W004; given both, the new one counts.
RENAMED = {"BATCH_SIZE": "CLAIM_SIZE"}


def renamed(user: dict[str, Any]) -> dict[str, Any]:
    """``user`` with every old name (RENAMED) given under its new one."""
    if not any(old in user for old in RENAMED):
        return user
    moved = {key: value for key, value in user.items() if key not in RENAMED}
    for old, new in RENAMED.items():
        if old in user:
            moved.setdefault(new, user[old])
    return moved


def user_settings() -> dict[str, Any]:
    """``settings.DELAYQUEUE`` as given (an empty dict when unset), old names renamed."""
    user = getattr(settings, "DELAYQUEUE", {}) or {}
    for old in RENAMED.keys() & user.keys():
        warnings.warn(
            f"DELAYQUEUE[{old!r}] is renamed {RENAMED[old]!r}; the old name stops working "
            "in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
    return renamed(user)


def with_fallbacks(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` (DEFAULTS overlaid with DELAYQUEUE) with what falls back to Celery's broker
    settings: REDIS_URL to CELERY_BROKER_URL and, when that is where the URL came from, the
    Sentinel master name and sentinel options to CELERY_BROKER_TRANSPORT_OPTIONS's
    ``master_name`` and ``sentinel_kwargs`` (as kombu reads them)."""
    config = dict(config)
    if config["REDIS_URL"] is None:
        broker_url = getattr(settings, "CELERY_BROKER_URL", None)
        config["REDIS_URL"] = broker_url or "redis://127.0.0.1:6379/0"
        options = getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", None)
        if broker_url and isinstance(options, dict):
            if config["SENTINEL_MASTER"] is None:
                config["SENTINEL_MASTER"] = options.get("master_name")
            if config["SENTINEL_KWARGS"] is None:
                config["SENTINEL_KWARGS"] = options.get("sentinel_kwargs")
    return config


@cache
def get_settings() -> Settings:
    config = with_fallbacks({**DEFAULTS, **user_settings()})
    names = {field.name for field in fields(Settings)}
    return Settings(
        **{name.lower(): value for name, value in config.items() if name.lower() in names}
    )


@receiver(setting_changed)
def _reset_settings(*, setting: str, **kwargs: Any) -> None:
    if setting in SETTINGS_READ:
        get_settings.cache_clear()
