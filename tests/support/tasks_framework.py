"""Django ``@task`` functions the Tasks backend tests enqueue (tests/tasks_backend/test_backend.py).

The Celery worker imports this module when it runs one of their jobs
(``delayqueue.run_django_task`` imports a task by its module path), under its own settings,
where TASKS names no delayqueue backend: so every task here is on the "default" queue and
backend, as any backend accepts them. Each run reports itself in a Redis list the tests read,
with Redis's clock (the clock of due times); the worker's ``task_started`` and
``task_finished`` signals are reported the same way."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import redis

from delayqueue.django_tasks.compat import (
    TaskContext,
    TaskResult,
    task,
    task_finished,
    task_started,
)
from delayqueue.engine.clients import ClusterClient

RAN = "test:django-tasks:ran"
SIGNALS = "test:django-tasks:signals"


def client() -> redis.Redis:
    """delayqueue's Redis, whatever its topology (tests/settings.py: DQ_TEST_TOPOLOGY)."""
    if os.environ.get("REDIS_CLUSTER") == "true":
        return ClusterClient.from_url(os.environ["REDIS_URL"])  # type: ignore[return-value]
    return redis.Redis.from_url(os.environ["REDIS_URL"])


def _report(into: str, **fields: Any) -> None:
    with client() as redis_client:
        seconds, micros = redis_client.time()
        fields["redis_ms"] = seconds * 1000 + micros / 1000
        redis_client.rpush(into, json.dumps(fields))


def reports(into: str = RAN) -> list[dict[str, Any]]:
    with client() as redis_client:
        return [json.loads(entry) for entry in redis_client.lrange(into, 0, -1)]


@task
def add(tag: str, a: int, b: int) -> int:
    _report(RAN, kind="add", tag=tag)
    return a + b


@task
async def async_add(tag: str, a: int, b: int) -> int:
    await asyncio.sleep(0)
    _report(RAN, kind="async_add", tag=tag)
    return a + b


@task(takes_context=True)
def with_context(context: TaskContext, tag: str) -> dict[str, Any]:
    _report(RAN, kind="with_context", tag=tag)
    return {"attempt": context.attempt, "id": context.task_result.id}


@task(takes_context=True)
def fails_first(context: TaskContext, tag: str) -> int:
    """Raises on its first attempt, succeeds on the next; returns its attempt."""
    _report(RAN, kind="fails_first", tag=tag, attempt=context.attempt)
    if context.attempt == 1:
        raise ValueError(f"first attempt of {tag}")
    return context.attempt


@task(takes_context=True)
def reads_itself(context: TaskContext, tag: str) -> str:
    """Reports its own result as the backend reads it from Redis while it runs."""
    found = context.task_result.task.get_backend().get_result(context.task_result.id)
    _report(
        RAN, kind="reads_itself", tag=tag, id=found.id, status=str(found.status),
        workers=found.worker_ids, started_ms=_ms(found.started_at),
        context_started_ms=_ms(context.task_result.started_at),
    )  # fmt: skip
    return tag


def _ms(moment: Any) -> float:
    return float(moment.timestamp() * 1000)


@task
def always_fails(tag: str) -> None:
    _report(RAN, kind="always_fails", tag=tag)
    raise KeyError(f"always {tag}")


@task
def waits_for_release(tag: str) -> str:
    """Runs until the test pushes onto ``release(tag)`` (at most 30 s)."""
    _report(RAN, kind="waits", tag=tag)
    with client() as redis_client:
        redis_client.blpop([release(tag)], timeout=30)
    return tag


def release(tag: str) -> str:
    return f"test:django-tasks:release:{tag}"


@task
def returns_no_json(tag: str) -> object:
    return object()


def _report_signal(name: str, sender: Any, task_result: TaskResult[Any]) -> None:
    _report(
        SIGNALS,
        signal=name,
        sender=f"{sender.__module__}.{sender.__qualname__}",
        id=task_result.id,
        status=str(task_result.status),
        attempts=task_result.attempts,
    )


def _started(sender: Any, task_result: TaskResult[Any], **kwargs: Any) -> None:
    _report_signal("task_started", sender, task_result)


def _finished(sender: Any, task_result: TaskResult[Any], **kwargs: Any) -> None:
    _report_signal("task_finished", sender, task_result)


task_started.connect(_started, dispatch_uid="tests.support.tasks_framework.started")
task_finished.connect(_finished, dispatch_uid="tests.support.tasks_framework.finished")
