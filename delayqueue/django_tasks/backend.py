"""``DelayQueueBackend``: Django's Tasks framework on delayqueue.

``Task.enqueue()`` writes an ordinary delayqueue job of ``delayqueue.run_django_task``
(run.py): ``run_after`` is its due time (none: due now), ``queue_name`` its queue, and the
result's id is the job's id, so ``delayqueue.cancel(queue, result.id)``, reschedule, the
admin, the command line and the metrics all work on it. ``get_result`` reads the job's
state and its results hash (results.py). docs/tasks-backend.md says how to set it up."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from delayqueue.conf import get_settings
from delayqueue.django_tasks import results
from delayqueue.django_tasks.compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from delayqueue.django_tasks.job_args import (
    BACKEND,
    BACKOFF,
    DEFAULT_BACKEND,
    DEFAULT_RESULT_TTL,
    PRIORITY,
    RESULT_TTL,
    RUN_DJANGO_TASK,
)
from delayqueue.django_tasks.task import (
    DelayQueueTask,
    TaskOptions,
    backoff_seconds,
    task_limits,
    task_options,
)
from delayqueue.engine.keys import JOB_ID, check_queue_name
from delayqueue.engine.limits import Limits
from delayqueue.engine.shards import shard_names
from delayqueue.engine.task_results import astored_task_result, stored_task_result
from delayqueue.errors import InvalidOption, InvalidQueueName
from delayqueue.producer.api import delay_many
from delayqueue.producer.async_api import adelay_many
from delayqueue.producer.due import Mode, due_at, is_naive
from delayqueue.producer.job_spec import Job, JobSpec, spec_encoded
from delayqueue.producer.task_options import checked_limits
from delayqueue.validators import (
    check_concurrency,
    check_expires,
    check_flag,
    check_max_attempts,
    check_positive_int,
    check_rate,
    check_visibility_timeout,
)
from delayqueue.wire import encode_args

MAX_RESULT_TTL = 365 * 24 * 3600
VALIDATED_KEPT = 1_000  # tasks remembered as validated, per backend


@dataclass(frozen=True)
class BackendOptions:
    """A backend's ``OPTIONS``, checked."""

    on_commit: bool = True  # ON_COMMIT: inside atomic(), write the job at commit, never on rollback
    result_ttl: int = (
        DEFAULT_RESULT_TTL  # RESULT_TTL: seconds a result is kept after its last write
    )
    max_attempts: int | None = None  # MAX_ATTEMPTS (None: DELAYQUEUE["MAX_ATTEMPTS"])
    backoff: float | None = None  # BACKOFF: base seconds (None: DELAYQUEUE["BACKOFF_BASE"])
    visibility_timeout: float | None = None  # VISIBILITY_TIMEOUT seconds (None: the worker's)
    rate: str | None = None  # RATE of every task without its own (docs/limits.md)
    concurrency: int | None = None  # CONCURRENCY
    expires: float | None = None  # EXPIRES seconds after run_after

    @classmethod
    def parse(cls, alias: str, options: Mapping[str, Any]) -> BackendOptions:
        known = {
            "ON_COMMIT": lambda v: check_flag(v, "ON_COMMIT"),
            "RESULT_TTL": lambda v: check_positive_int(v, "RESULT_TTL", maximum=MAX_RESULT_TTL),
            "MAX_ATTEMPTS": lambda v: check_max_attempts(v, "MAX_ATTEMPTS"),
            "BACKOFF": lambda v: backoff_seconds(v, "BACKOFF"),
            "VISIBILITY_TIMEOUT": lambda v: check_visibility_timeout(v, "VISIBILITY_TIMEOUT"),
            "RATE": lambda v: check_rate(v, "RATE") and v,
            "CONCURRENCY": lambda v: check_concurrency(v, "CONCURRENCY"),
            "EXPIRES": lambda v: check_expires(v, "EXPIRES") and v,
        }
        where = f"TASKS[{alias!r}]['OPTIONS']"
        if not isinstance(options, Mapping):
            raise InvalidTaskBackend(f"{where} must be a dict, not {type(options).__name__}")
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise InvalidTaskBackend(
                f"{where} has unknown options {unknown}; known: {sorted(known)}"
            )
        try:
            checked: dict[str, Any] = {name: known[name](v) for name, v in options.items()}
        except InvalidOption as exc:
            raise InvalidTaskBackend(f"{where}: {exc}") from None
        return cls(
            on_commit=checked.get("ON_COMMIT", True),
            result_ttl=checked.get("RESULT_TTL", DEFAULT_RESULT_TTL),
            max_attempts=checked.get("MAX_ATTEMPTS"),
            backoff=checked.get("BACKOFF"),
            visibility_timeout=checked.get("VISIBILITY_TIMEOUT"),
            rate=checked.get("RATE"),
            concurrency=checked.get("CONCURRENCY"),
            expires=checked.get("EXPIRES"),
        )


class DelayQueueBackend(BaseTaskBackend):
    """Django's Tasks on delayqueue: deferred (``run_after``), async tasks, results from any
    process, priorities (kept with the job and its result: docs/tasks-backend.md)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True
    task_class = DelayQueueTask  # @task(max_attempts=..., backoff=..., visibility_timeout=...)

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.config = BackendOptions.parse(alias, self.options)
        for queue in sorted(self.queues):
            try:
                check_queue_name(queue)
            except InvalidQueueName as exc:
                raise InvalidTaskBackend(f"TASKS[{alias!r}]['QUEUES']: {exc}") from None
        # The tasks this backend validated, by identity, with what their jobs carry. A Task
        # is frozen and is validated when it is made (@task, .using(): Task.__post_init__),
        # so one validated against this backend (whose settings are fixed) is still valid
        # when it is enqueued, where Django's backends validate it again. Strong references:
        # an id is not reused while it is remembered. At most VALIDATED_KEPT.
        self._validated: dict[int, TaskJobs] = {}

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Django's checks, then delayqueue's queue name rule and the task's own options."""
        self._validate(task)

    def _validate(self, task: Task[Any, Any]) -> TaskJobs:
        super().validate_task(task)
        try:
            check_queue_name(task.queue_name)
        except InvalidQueueName as exc:
            raise InvalidTask(str(exc)) from None
        jobs = TaskJobs.of(task, task_options(task), self.alias, self.config)
        if len(self._validated) >= VALIDATED_KEPT:
            self._validated.clear()
        self._validated[id(task)] = jobs
        return jobs

    def _jobs_of(self, task: Task[Any, Any]) -> TaskJobs:
        """What the task's jobs carry; the task validated first unless this backend did."""
        found = self._validated.get(id(task))
        if found is not None and found.task is task:
            return found
        return self._validate(task)

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        spec = self._jobs_of(task).spec(args, kwargs)
        delay_many([spec], on_commit=self.config.on_commit)
        return self._enqueued(task, spec.job, args, kwargs)

    async def aenqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        spec = self._jobs_of(task).spec(args, kwargs)
        await adelay_many([spec], on_commit=self.config.on_commit)
        return self._enqueued(task, spec.job, args, kwargs)

    def get_result(self, result_id: str) -> TaskResult[Any]:
        queues = self._result_queues(result_id)
        stored = stored_task_result(queues, result_id)
        if stored is None:
            raise TaskResultDoesNotExist(result_id)
        return results.from_stored(stored, result_id)

    async def aget_result(self, result_id: str) -> TaskResult[Any]:
        queues = self._result_queues(result_id)
        stored = await astored_task_result(queues, result_id)
        if stored is None:
            raise TaskResultDoesNotExist(result_id)
        return results.from_stored(stored, result_id)

    # ----

    def _enqueued(self, task: Task[Any, Any], job: Job, args: Any, kwargs: Any) -> TaskResult[Any]:
        """The READY result of a job just written (or to be written at commit), and
        ``task_enqueued``, sent once the job is in Redis: at commit when it waits for one,
        never on rollback."""
        result = results.make_result(
            task, job.id, list(args), dict(kwargs), self.alias, TaskResultStatus.READY,
            results.History(),
        )  # fmt: skip

        def send() -> None:
            task_enqueued.send(type(self), task_result=result)

        if job.state == "pending":
            transaction.on_commit(send)
        else:
            send()
        return result

    def _result_queues(self, result_id: str) -> list[str]:
        """The queues a result of this backend may be in (shards included); empty: every
        queue delayqueue knows. TaskResultDoesNotExist for what is no job id."""
        if not isinstance(result_id, str) or not JOB_ID.fullmatch(result_id):
            raise TaskResultDoesNotExist(result_id)
        return [shard for queue in sorted(self.queues) for shard in shard_names(queue)]


@dataclass(frozen=True)
class TaskJobs:
    """What every job of one task through one backend carries, worked out once, when the
    backend validates the task: a job of ``delayqueue.run_django_task`` whose arguments are
    the task's module path, its args and kwargs, and whose keywords (job_args.py) are the
    task's options that are not the default. ``spec`` checks and encodes a call's own
    arguments (errors name them: ``args[1]``, not the job's wrapping) and writes the rest
    around them."""

    task: Task[Any, Any]
    head: str  # the job's arguments' JSON up to the call's own: '["module.path",'
    options: str  # the keywords' JSON, "" when every one is the default
    max_attempts: int | None  # its own (own options), else OPTIONS'; None: delayqueue's
    visibility_timeout: float | None
    limits: tuple[Limits | None, int | None] = (None, None)  # rate/concurrency, expiry ms

    @classmethod
    def of(
        cls, task: Task[Any, Any], own: TaskOptions, alias: str, config: BackendOptions
    ) -> TaskJobs:
        """The task's own retry options (``own``) first, then the backend's OPTIONS."""
        max_attempts, backoff, visibility_timeout = own
        if max_attempts is None:
            max_attempts = config.max_attempts
        if backoff is None:
            backoff = config.backoff
        if visibility_timeout is None:
            visibility_timeout = config.visibility_timeout
        options: dict[str, Any] = {}
        if alias != DEFAULT_BACKEND:
            options[BACKEND] = alias
        if task.priority:  # an int, also for True (a bool passes Django's own check)
            options[PRIORITY] = int(task.priority)
        if config.result_ttl != DEFAULT_RESULT_TTL:
            options[RESULT_TTL] = config.result_ttl
        if backoff is not None:
            options[BACKOFF] = backoff
        # (no limit here: each call checks the whole job's size against MAX_PAYLOAD_BYTES,
        # whose value may change after the task is made)
        path_json, options_json = encode_args([task.module_path], options, sys.maxsize)
        rate, concurrency, expires = task_limits(task)
        limits = checked_limits(
            config.rate if rate is None else rate,
            config.concurrency if concurrency is None else concurrency,
            config.expires if expires is None else expires,
        )
        head = path_json[:-1] + ","
        return cls(task, head, options_json, max_attempts, visibility_timeout, limits)

    def spec(self, args: Any, kwargs: Any) -> JobSpec:
        """The checked job of one call (NotSerializable, PayloadTooLarge, InvalidDelay)."""
        args_json, kwargs_json = encode_args(args, kwargs, get_settings().max_payload_bytes)
        return spec_encoded(
            RUN_DJANGO_TASK,
            f"{self.head}{args_json},{kwargs_json or '{}'}]",
            self.options,
            _due(self.task.run_after),
            queue=self.task.queue_name,
            max_attempts=self.max_attempts,
            visibility_timeout=self.visibility_timeout,
            limits=(*self.limits, self.task.module_path),
        )


def _due(run_after: datetime | None) -> tuple[Mode, int]:
    """delayqueue's due time for ``run_after``: its millisecond, rounded up, so the job
    never runs before it; none: due now. A naive one (Django allows it when USE_TZ is
    off) is in TIME_ZONE, as Django reads naive datetimes then."""
    if run_after is None:
        return "delay", 0
    if is_naive(run_after, "run_after"):
        run_after = timezone.make_aware(run_after, timezone.get_default_timezone())
    return due_at(run_after, "run_after")
