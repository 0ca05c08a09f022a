"""Reads of one job's record: its hash ``QueueKeys.job(id)`` and, for a job never claimed,
its packed spec (``packing.py``); the fields by their names in ``keys.JobField``."""

from __future__ import annotations

from typing import Any

from delayqueue.engine.async_clients import loop_clients
from delayqueue.engine.clients import get_redis
from delayqueue.engine.keys import JobField, QueueKeys
from delayqueue.engine.packing import job_fields
from delayqueue.engine.redis_errors import redis_errors

# ---- the task name of a job, wherever its record is -------------------------------------


def _task_name_commands(keys: QueueKeys, job_id: str) -> list[tuple[Any, ...]]:
    return [
        ("HGET", keys.job(job_id), JobField.TASK),
        ("HGET", keys.spec_bucket(job_id), job_id),
    ]


def _task_name_from(replies: list[Any]) -> str:
    # A key of the wrong type (corrupt data) only leaves the name unknown ("").
    in_hash, spec = (None if isinstance(reply, Exception) else reply for reply in replies)
    fields = job_fields({JobField.TASK: in_hash} if in_hash else {}, spec)
    return fields.get(JobField.TASK, "")


def read_task_name(keys: QueueKeys, job_id: str) -> str:
    """The task of job ``job_id``, from its hash or its packed spec, in one round trip."""
    with redis_errors():
        pipe = get_redis().pipeline(transaction=False)
        for command in _task_name_commands(keys, job_id):
            pipe.execute_command(*command)
        return _task_name_from(pipe.execute(raise_on_error=False))


async def aread_task_name(keys: QueueKeys, job_id: str) -> str:
    """``read_task_name`` on the running loop's client."""
    clients = await loop_clients()
    with redis_errors():
        pipe = clients.client.pipeline(transaction=False)
        for command in _task_name_commands(keys, job_id):
            pipe.execute_command(*command)
        return _task_name_from(list(await pipe.execute(raise_on_error=False)))
