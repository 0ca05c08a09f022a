"""What a job is, checked at the call: the ``Job`` handle a call returns, and ``spec()`` /
``spec_many()``, which check everything about a job (its task, arguments, due time, queue,
key and options) before anything touches Redis."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from celery import Task

from delayqueue.celery_app import resolve_task
from delayqueue.conf import Settings, get_settings
from delayqueue.engine.keys import check_queue_name, limit_name, new_job_id, new_job_ids
from delayqueue.engine.limits import Limits, limits_arg
from delayqueue.engine.packing import CODE_MARK, pack
from delayqueue.engine.shards import logical, shard_count, shard_for
from delayqueue.errors import NotSerializable, UnknownTask
from delayqueue.integrations.otel import scheduling_context
from delayqueue.producer import moves
from delayqueue.producer.due import Mode, to_due
from delayqueue.producer.job_limits import job_limits
from delayqueue.validators import (
    check_flag,
    check_key,
    check_max_attempts,
    check_on_conflict,
    check_visibility_timeout,
)
from delayqueue.wire import check_size, encode_args

OnConflict = Literal["keep", "replace"]
State = Literal["pending", "scheduled", "inflight", "dead"]


@dataclass
class Job:
    """A handle on a scheduled job.

    ``state`` is "pending" until the surrounding transaction commits and the job is written;
    when a dedupe ``key`` kept an existing job, ``id`` becomes that job's id.
    """

    id: str
    queue: str
    task: str
    key: str | None = None
    due_at: datetime | None = None
    state: State = "pending"
    outcome: Literal["created", "kept", "replaced"] | None = None

    def cancel(self) -> bool:
        """Remove the job while it is still scheduled; whether it was removed."""
        return moves.cancel(self.queue, self.id)

    async def acancel(self) -> bool:
        """``cancel()`` on the running event loop."""
        return await moves.acancel(self.queue, self.id)


@dataclass
class JobSpec:
    """A checked, ready-to-write job (what ``spec()`` returns and ``delay_many`` takes)."""

    job: Job
    mode: Mode
    ms: int
    on_conflict: OnConflict
    packed: str  # the spec as enqueue.lua stores it (delayqueue.engine.packing)
    durable: bool | None = None  # wait for replicas (None: the task's, else DURABLE)
    limits: str = ""  # its limits and expiry as enqueue.lua takes them (engine/limits.py)


def spec(
    task: Task | str,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    delay: float | timedelta | None = None,
    eta: datetime | None = None,
    queue: str | None = None,
    key: str | None = None,
    on_conflict: OnConflict = "keep",
    max_attempts: int | None = None,
    visibility_timeout: float | None = None,
    durable: bool | None = None,
    limit_key: str | None = None,
    expires: float | timedelta | None = None,
) -> JobSpec:
    """Check everything about a job without writing it. ``durable``: the write waits for
    replicas (see ``enqueue``). ``limit_key``: the task's rate and concurrency apply to the
    jobs of each key apart; ``expires``: seconds (or a timedelta) after its due time that the
    job may still start, instead of the task's (docs/limits.md)."""
    config = get_settings()
    target = _target(task, queue, max_attempts, visibility_timeout, config)
    mode, ms = to_due(delay, eta)
    args_json, kwargs_json = encode_args(args, kwargs or {}, config.max_payload_bytes)
    if key is not None:
        check_key(key)
    check_on_conflict(on_conflict)
    job_id = new_job_id()
    trace = scheduling_context(target.queue, job_id, target.name)  # (docs/tracing.md)
    packed = pack(target.name, args_json, kwargs_json, target.attempts, target.vt, key or "", trace)
    queue = target.queue
    if target.sharded:
        # the job lives in the shard its limit's name, else its key, else its id hashes to
        routing = limit_name(target.name, limit_key or "") if target.limits else key or job_id
        queue = shard_for(queue, routing)
    job = Job(id=job_id, queue=queue, task=target.name, key=key)
    if durable is None:
        durable = target.durable
    else:
        check_flag(durable, "durable")
    if limit_key is None and expires is None:  # the task's own
        limits = target.limits_arg
    else:
        limits = job_limits(target.name, target.limits, target.expires_ms, limit_key, expires)
    return JobSpec(job, mode, ms, on_conflict, packed, durable, limits)


def spec_encoded(
    task: Task | str,
    args_json: str,
    kwargs_json: str,
    due: tuple[Mode, int],
    *,
    queue: str | None = None,
    max_attempts: int | None = None,
    visibility_timeout: float | None = None,
    limits: tuple[Limits | None, int | None, str] = (None, None, ""),
) -> JobSpec:
    """``spec()`` for a caller that encoded the arguments itself (each part as
    ``wire.encode_args`` writes it: checked, no newline) and has its due time as
    ``to_due`` / ``due_at`` give it. The Django Tasks backend, whose job's arguments wrap
    its caller's, checks those once, as the caller's, and writes the rest around them."""
    config = get_settings()
    target = _target(task, queue, max_attempts, visibility_timeout, config)
    check_size(args_json, kwargs_json, config.max_payload_bytes)
    job_id = new_job_id()
    trace = scheduling_context(target.queue, job_id, target.name)  # (docs/tracing.md)
    packed = pack(target.name, args_json, kwargs_json, target.attempts, target.vt, trace=trace)
    # ``limits``: the caller's own (rate and concurrency, expiry ms, limit key), else the task's
    own, expires_ms, limit_key = limits
    if not own and expires_ms is None:
        own, expires_ms = target.limits, target.expires_ms
    routing = limit_name(target.name, limit_key) if own else job_id
    queue = shard_for(target.queue, routing) if target.sharded else target.queue
    job = Job(id=job_id, queue=queue, task=target.name)
    encoded = limits_arg(own, limit_key, expires_ms)
    return JobSpec(job, due[0], due[1], "keep", packed, target.durable, encoded)


@dataclass(frozen=True)
class _Target:
    """What spec() checks about a task and its options, the same for each of its calls."""

    task: Task | str
    config: Settings
    name: str
    queue: str
    attempts: str
    vt: str  # visibility timeout ms, or "" for the worker's default
    durable: bool | None  # the task's durable=, if it says
    sharded: bool  # the queue has shards (engine/shards.py)
    limits: Limits | None = None  # the task's rate and concurrency (engine/limits.py)
    expires_ms: int | None = None  # the task's expiry
    limits_arg: str = ""  # both as enqueue.lua takes them (a call with no limit_key or expires)


_targets: dict[tuple[Any, ...], _Target] = {}


def _target(
    task: Task | str,
    queue: str | None,
    max_attempts: int | None,
    visibility_timeout: float | None,
    config: Settings,
) -> _Target:
    """The checked target of ``task`` with these options, remembered per task object and
    options until the settings change (a new ``config``): most calls repeat the last one."""
    try:
        # The options' types too: True == 1 and hashes alike, but True is refused.
        cache_key = (
            id(task), queue, max_attempts, visibility_timeout,
            type(max_attempts), type(visibility_timeout),
        )  # fmt: skip
        found = _targets.get(cache_key)
    except TypeError:  # unhashable options: _check_target says what is wrong with them
        return _check_target(task, queue, max_attempts, visibility_timeout, config)
    if found is not None and found.task is task and found.config is config:
        return found
    target = _check_target(task, queue, max_attempts, visibility_timeout, config)
    if len(_targets) >= 1_000:
        _targets.clear()
    _targets[cache_key] = target
    return target


def _check_target(
    task: Task | str,
    queue: str | None,
    max_attempts: int | None,
    visibility_timeout: float | None,
    config: Settings,
) -> _Target:
    name, task_obj = resolve_task(task)
    if "\n" in name or name.startswith(CODE_MARK):
        raise UnknownTask(f"task names cannot contain a newline or start with \\x01: {name!r}")
    queue = check_queue_name(queue or getattr(task_obj, "dq_queue", None) or config.default_queue)
    # `is not None`, not `or`: an explicit 0 is an error, not "use the default".
    attempts = check_max_attempts(
        _first_given(max_attempts, getattr(task_obj, "dq_max_attempts", None), config.max_attempts)
    )
    timeout = _first_given(visibility_timeout, getattr(task_obj, "dq_visibility_timeout", None))
    vt = "" if timeout is None else str(round(check_visibility_timeout(timeout) * 1000))
    durable = getattr(task_obj, "dq_durable", None)
    sharded = shard_count(queue) > 1
    limits, expires_ms = (
        getattr(task_obj, "dq_limits", None),
        getattr(task_obj, "dq_expires_ms", None),
    )
    return _Target(
        task, config, name, queue, str(attempts), vt, durable, sharded, limits, expires_ms,
        limits_arg(limits, "", expires_ms),
    )  # fmt: skip


def _first_given(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


_NONE: Any = object()  # no first call


def spec_many(
    task: Task | str,
    calls: Iterable[Sequence[Any]],
    *,
    delay: float | timedelta | None = None,
    eta: datetime | None = None,
) -> list[JobSpec]:
    """``spec(task, args, delay=..., eta=...)`` for each args of ``calls``: what does not
    depend on the arguments (task, queue, due time, settings) is checked once."""
    rest = iter(calls)
    first_args = next(rest, _NONE)
    if first_args is _NONE:
        return []
    first = spec(task, _positional(first_args, 0), delay=delay, eta=eta)
    head, _, tail = first.packed.split("\n", 2)  # task name, args, the rest
    max_bytes = int(get_settings().max_payload_bytes)
    specs = [first]
    queue = logical(first.job.queue)
    limited = bool(first.limits.partition("\n")[2])  # (its jobs share their limit's shard)
    spread = shard_count(queue) > 1 and not limited  # (each job in its id's shard)
    shard, name, mode, ms = first.job.queue, first.job.task, first.mode, first.ms
    durable, limits = first.durable, first.limits
    later = list(rest)
    for index, (args, job_id) in enumerate(zip(later, new_job_ids(len(later)), strict=True), 1):
        if type(args) is not tuple and type(args) is not list:
            _positional(args, index)
        packed = f"{head}\n{encode_args(args, {}, max_bytes)[0]}\n{tail}"
        job = Job(job_id, shard_for(queue, job_id) if spread else shard, name)
        specs.append(JobSpec(job, mode, ms, "keep", packed, durable, limits))
    return specs


def _positional(args: Any, index: int) -> Sequence[Any]:
    """One call of ``spec_many``: a list or tuple of positional arguments."""
    if not isinstance(args, list | tuple):
        hint = (
            "; for keyword arguments use delayqueue.spec(task, kwargs={...}) per job with "
            "delayqueue.delay_many()"
            if isinstance(args, Mapping)
            else ""
        )
        raise NotSerializable(
            f"call {index} is a {type(args).__name__}, not a list or tuple of positional "
            f"arguments{hint}"
        )
    return args
