"""delayqueue: reliable, precise and inspectable delayed jobs for Django + Celery, on Redis."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "CorruptJob",
    "DelayQueueError",
    "DelayedTask",
    "InvalidDelay",
    "InvalidJobId",
    "InvalidKey",
    "InvalidOption",
    "InvalidQueueName",
    "Job",
    "JobSpec",
    "NotSerializable",
    "PayloadTooLarge",
    "RedisError",
    "NotDurable",
    "RedisLoading",
    "RedisMisconfigured",
    "RedisOutOfMemory",
    "RedisPermissionDenied",
    "RedisReadOnly",
    "RedisUnavailable",
    "UnknownTask",
    "acancel",
    "adelay_many",
    "aenqueue",
    "areschedule",
    "cancel",
    "delay_many",
    "delayed_task",
    "enqueue",
    "periodic_task",
    "reschedule",
    "spec",
]

from delayqueue.errors import (
    CorruptJob,
    DelayQueueError,
    InvalidDelay,
    InvalidJobId,
    InvalidKey,
    InvalidOption,
    InvalidQueueName,
    NotDurable,
    NotSerializable,
    PayloadTooLarge,
    RedisError,
    RedisLoading,
    RedisMisconfigured,
    RedisOutOfMemory,
    RedisPermissionDenied,
    RedisReadOnly,
    RedisUnavailable,
    UnknownTask,
)

if TYPE_CHECKING:
    from delayqueue.periodic.declare import periodic_task
    from delayqueue.producer.api import (
        Job,
        JobSpec,
        cancel,
        delay_many,
        enqueue,
        reschedule,
        spec,
    )
    from delayqueue.producer.async_api import acancel, adelay_many, aenqueue, areschedule
    from delayqueue.producer.decorator import DelayedTask, delayed_task

_LAZY = {
    "acancel": "delayqueue.producer.async_api",
    "adelay_many": "delayqueue.producer.async_api",
    "aenqueue": "delayqueue.producer.async_api",
    "areschedule": "delayqueue.producer.async_api",
    "DelayedTask": "delayqueue.producer.decorator",
    "delayed_task": "delayqueue.producer.decorator",
    "Job": "delayqueue.producer.api",
    "JobSpec": "delayqueue.producer.api",
    "cancel": "delayqueue.producer.api",
    "delay_many": "delayqueue.producer.api",
    "enqueue": "delayqueue.producer.api",
    "reschedule": "delayqueue.producer.api",
    "spec": "delayqueue.producer.api",
    "periodic_task": "delayqueue.periodic.declare",
}


def __getattr__(name: str) -> Any:
    # Lazy, so that `import delayqueue` (e.g. from INSTALLED_APPS) imports neither Celery
    # nor the Django models before the app registry is ready.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'delayqueue' has no attribute {name!r}")
