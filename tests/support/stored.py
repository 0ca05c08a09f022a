"""What Redis holds about one job, read the way the admin reads it."""

from __future__ import annotations

from typing import Any

import redis

from delayqueue.engine.keys import QueueKeys
from delayqueue.engine.packing import job_fields, pack, task_code


def stored_job(r: redis.Redis, keys: QueueKeys, job_id: str) -> dict[str, str]:
    """A job's hash and, while it was never claimed, its packed spec, as one dict."""
    hash_fields = {str(k): str(v) for k, v in r.hgetall(keys.job(job_id)).items()}
    spec = r.hget(keys.spec_bucket(job_id), job_id)
    tasks = {str(k): str(v) for k, v in r.hgetall(keys.tasks).items()}
    return job_fields(hash_fields, None if spec is None else str(spec), tasks)


def packed_specs(r: redis.Redis, keys: QueueKeys) -> dict[Any, Any]:
    """Every packed spec of the queue, id -> spec, from all its buckets (every one of those
    keys must be a hash); a coded one (text) as the producer packed it (``in_full``)."""
    found: dict[Any, Any] = {}
    pattern = keys.spec_prefix.replace("[", "\\[").replace("]", "\\]") + "*"
    for bucket in r.scan_iter(match=pattern, count=1000):
        found.update(r.hgetall(bucket))
    if any(isinstance(spec, str) and task_code(spec) for spec in found.values()):
        tasks = {str(k): str(v) for k, v in r.hgetall(keys.tasks).items()}
        found = {i: in_full(spec, tasks) for i, spec in found.items()}
    return found


def in_full(spec: str, tasks: dict[str, str]) -> str:
    """Coded spec ``spec`` as the producer packed it (``packing.pack``), with the task
    options of ``tasks``; any other spec as it is."""
    if task_code(spec) is None:
        return spec
    f = job_fields({}, spec, tasks)
    return pack(f["task"], f["args"], f.get("kwargs", ""), f.get("max", ""), f.get("vt", ""),
                f.get("key", ""), f.get("tc", ""))  # fmt: skip
