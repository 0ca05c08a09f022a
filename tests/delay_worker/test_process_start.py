"""A Celery process ready for its first job sets the objects of its start aside from the
garbage collector's full passes (``gc.freeze``, delayqueue/tasks.py): a pool process at
``worker_process_init``, a worker whose pool runs jobs in its own process at
``worker_ready``; the prefork worker's main process runs no job and freezes nothing."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from celery.concurrency.prefork import TaskPool as PreforkPool

from delayqueue import tasks


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """This process with nothing frozen, before the test and after it."""
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    try:
        yield
    finally:
        gc.unfreeze()


def test_a_pool_process_freezes_the_objects_of_its_start(r: redis.Redis, unfrozen: None) -> None:
    tasks._warm_up_pool_process()
    assert gc.get_freeze_count() > 1_000  # (the modules, the app, the settings ...)


def test_a_worker_freezes_once_ready_when_its_pool_runs_jobs_in_its_own_process(
    r: redis.Redis, unfrozen: None
) -> None:
    prefork = PreforkPool.__new__(PreforkPool)  # (its class is what counts: never started)
    tasks._warm_up_in_process_pool(sender=SimpleNamespace(pool=prefork))
    assert gc.get_freeze_count() == 0  # (its pool processes freeze their own)
    tasks._warm_up_in_process_pool(sender=SimpleNamespace(pool=object()))  # (-P threads, solo)
    assert gc.get_freeze_count() > 1_000


def test_a_project_can_leave_the_collector_as_it_is(
    r: redis.Redis, unfrozen: None, settings: Any
) -> None:
    settings.DELAYQUEUE = {**settings.DELAYQUEUE, "FREEZE_PROCESS_START": False}
    tasks._warm_up_pool_process()
    tasks._warm_up_in_process_pool(sender=SimpleNamespace(pool=object()))
    assert gc.get_freeze_count() == 0
