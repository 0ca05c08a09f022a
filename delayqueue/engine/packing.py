"""The packed spec of a scheduled job that was never claimed (see ``lua/_spec.lua``).

Such a job is one field of its queue's specs hash, ``id -> spec``, instead of a hash of its
own: a Redis key costs about 100 bytes before it holds anything, and most jobs of a delayed
queue spend their whole life scheduled. Claiming a job unpacks its spec into its job hash,
where attempts, tokens and history join it. In its bucket a spec names its task, max attempts
and visibility by a short code, which the queue's tasks hash (``QueueKeys.tasks``) maps to
them (``task_code``, ``job_fields``' ``tasks``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from itertools import repeat

from delayqueue.engine.keys import JobField, QueueKeys

# The first character of a coded spec's code (lua/_spec.lua): no task path starts
# with it.
CODE_MARK = "\x01"
_CODE = re.compile(r"(\x01[0-9A-Za-z]*)\[")
# The task whose jobs' specs stay uncoded: the runner of Django tasks' jobs
# (django_tasks/job_args.py), whose spec engine/task_results.py reads without the queue's
# tasks hash (a Django task's result before its job's first claim).
_UNCODED = "delayqueue.run_django_task\n"


def codable(specs: Iterable[str]) -> bool:
    """Whether enqueue.lua may code ``specs`` (its tasks hash is given: lua/_spec.lua):
    not when one is a spec of a task that stays uncoded."""
    return not any(map(str.startswith, specs, repeat(_UNCODED)))


def enqueue_keys(keys: QueueKeys, specs: Iterable[str]) -> list[str]:
    """enqueue.lua's KEYS for a call that writes ``specs``: with the tasks hash, which codes
    them, unless one of them stays uncoded (``codable``). One list per queue and kind, made
    on its first use (every delay_for asks): a caller never changes it."""
    kind = (keys.base, codable(specs))  # (the base names the queue: no dataclass hash)
    found = _enqueue_keys.get(kind)
    if found is None:
        found = [keys.scheduled, keys.inflight, keys.dedupe, keys.job_prefix, keys.spec_prefix]
        if kind[1]:
            found.append(keys.tasks)
        if len(_enqueue_keys) >= 4_096:
            _enqueue_keys.clear()
        _enqueue_keys[kind] = found
    return found


_enqueue_keys: dict[tuple[str, bool], list[str]] = {}


# In this order, joined by "\n". Only the dedupe key, last, may itself contain "\n". The
# trace context (docs/tracing.md) is there only when the job keeps one or its key has a
# "\n": a spec with exactly five "\n" has the six other fields (lua/_spec.lua).
SPEC_FIELDS = (
    JobField.TASK,
    JobField.ARGS,
    JobField.KWARGS,
    JobField.MAX_ATTEMPTS,
    JobField.VISIBILITY_MS,
    JobField.TRACE,
    JobField.KEY,
)


def pack(
    task: str, args_json: str, kwargs_json: str = "", max_attempts: str = "", vt: str = "",
    key: str = "", trace: str = "",
) -> str:  # fmt: skip
    """The spec as one string; every part but ``key`` must be free of "\\n"."""
    if trace or "\n" in key:
        return f"{task}\n{args_json}\n{kwargs_json}\n{max_attempts}\n{vt}\n{trace}\n{key}"
    return f"{task}\n{args_json}\n{kwargs_json}\n{max_attempts}\n{vt}\n{key}"


def without_trace(spec: str) -> str:
    """``spec`` with no trace context (a schedule's spec, which every occurrence shares)."""
    parts = spec.split("\n", 6)
    if len(parts) != 7 or not parts[5]:
        return spec
    task, args_json, kwargs_json, max_attempts, vt = parts[:5]
    return pack(task, args_json, kwargs_json, max_attempts, vt, parts[6])


def with_trace(spec: str, trace: str) -> str:
    """``spec`` keeping the trace context ``trace`` (one extra run of a schedule's spec, say);
    ``spec`` as it is when ``trace`` is "" or ``spec`` is no packed spec."""
    parts = spec.split("\n", 6) if trace else []
    if len(parts) == 6:
        parts.insert(5, "")
    elif len(parts) != 7:
        return spec
    parts[5] = trace
    return "\n".join(parts)


def unpack(spec: str) -> dict[str, str] | None:
    """The spec's non-empty fields by name, or None when it is not a packed spec."""
    parts = spec.split("\n", 6)
    if len(parts) == 6:
        parts.insert(5, "")
    elif len(parts) != 7:
        return None
    return {name: value for name, value in zip(SPEC_FIELDS, parts, strict=True) if value}


def task_code(spec: str) -> str | None:
    """The code by which packed spec ``spec``, as a bucket holds it, names its task and
    options (the queue's tasks hash maps it to them: lua/_spec.lua); None when the spec is
    not coded (a spec an earlier version wrote, or one read from elsewhere)."""
    found = _CODE.match(spec)
    return found.group(1) if found else None


def _uncoded(spec: str, code: str, options: str) -> str | None:
    """Coded spec ``spec`` in full with ``options`` ("<task>\\n<max>\\n<vt>") for its
    ``code`` (lua/_spec.lua, split_spec), or None when ``options`` are malformed."""
    task_max_vt = options.split("\n")
    if len(task_max_vt) != 3 or not task_max_vt[0]:
        return None
    task, max_attempts, vt = task_max_vt
    args, kwargs, trace, key = (spec[len(code) :].split("\n", 3) + ["", "", ""])[:4]
    return f"{task}\n{args}\n{kwargs}\n{max_attempts}\n{vt}\n{trace}\n{key}"


def job_fields(
    hash_fields: dict[str, str], spec: str | None, tasks: Mapping[str, str] | None = None
) -> dict[str, str]:
    """What one job is: its hash's fields, under those of its packed spec when it has one.
    A coded spec is read with ``tasks`` (code -> task options, from the queue's tasks hash);
    one whose code it lacks is shown as it is (``JobField.RAW``)."""
    if spec is None:
        return hash_fields
    code = task_code(spec)
    if code is not None:
        options = (tasks or {}).get(code) if len(code) > 1 else None
        full = _uncoded(spec, code, options) if options else None
        if full is None:
            return {**hash_fields, JobField.RAW: spec}
        spec = full
    unpacked = unpack(spec)
    if unpacked is None:
        return {**hash_fields, JobField.RAW: spec}
    return {**hash_fields, **unpacked}
