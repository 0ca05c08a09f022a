"""The benchmark's Django tasks (Django's Tasks framework on delayqueue's backend)."""

from __future__ import annotations

import time

from bench.tasks import LATENESS, client
from delayqueue.django_tasks.compat import task


@task(queue_name="bench")
def stamp_task(due_ms: int) -> None:
    """Record when it started against the ``run_after`` it was given (ms)."""
    client().rpush(LATENESS, f"{due_ms} {time.time() * 1000:.3f}")


@task(queue_name="bench")
def noop_task(n: int) -> None:
    """Nothing: the enqueue scenario never runs it."""
