"""``@delayed_task``: a Celery task that can also be scheduled, cancelled and rescheduled."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, cast, overload

from celery import Task, shared_task
from celery.local import Proxy

# delayqueue's own Celery tasks (run_batch, run_task) go wherever a @delayed_task goes: a
# Celery app that lists its task modules itself (include=[...]) and never autodiscovers
# still runs every form the delay worker sends.
from delayqueue import tasks  # noqa: F401
from delayqueue.conf import get_settings
from delayqueue.engine.limits import Limits
from delayqueue.engine.shards import declare, declare_limited
from delayqueue.producer import api, async_api
from delayqueue.producer.due import delay_seconds
from delayqueue.producer.task_options import limit_options, task_options
from delayqueue.producer.task_proxy import per_app
from delayqueue.runner.attempt import Backoff
from delayqueue.runner.job import run_job
from delayqueue.validators import check_flag
from delayqueue.wire import dispatch_headers

if TYPE_CHECKING:
    _TaskBase = Task[Any, Any]
else:  # Celery's Task is subscriptable at run time from Celery 5.5 on (5.4 is supported)
    _TaskBase = Task


class DelayedTask(_TaskBase):
    """Base class of tasks made by ``@delayed_task``.

    The scheduling methods reserve the keywords ``seconds``, ``minutes``, ``hours``, ``days``,
    ``delta``, ``eta``, ``key``, ``on_conflict``, ``on_commit`` and ``durable``; a function
    that takes those names itself is scheduled with ``delayqueue.enqueue(task, args, kwargs,
    ...)``.
    """

    dq_delayed = True  # (wire.DELAYED_MARK: how the delay worker knows such a task)
    dq_queue: str | None = None
    dq_max_attempts: int | None = None
    dq_backoff: Backoff | None = None
    dq_visibility_timeout: float | None = None
    dq_batch: int | None = None  # jobs per Celery message; None: batches only under a backlog
    dq_durable: bool | None = None  # its jobs' writes wait for replicas; None: DURABLE decides
    dq_shards: int | None = None  # its queue's shards (engine/shards.py)
    dq_limits: Limits | None = None  # its rate and concurrency (engine/limits.py)
    dq_expires_ms: int | None = None  # its jobs are not started this long after due

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dispatch = dispatch_headers(self.request)
        if dispatch is None:  # .delay(), .apply_async() or a plain call: run as Celery does
            return super().__call__(*args, **kwargs)
        return run_job(self.run, args, kwargs, dispatch, backoff=self.dq_backoff)

    @property
    def delay_queue(self) -> str:
        return self.dq_queue or str(get_settings().default_queue)

    def delay_for(
        self,
        *args: Any,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        delta: timedelta | None = None,
        key: str | None = None,
        on_conflict: api.OnConflict = "keep",
        on_commit: bool = True,
        durable: bool | None = None,
        limit_key: str | None = None,
        expires: float | timedelta | None = None,
        **kwargs: Any,
    ) -> api.Job:
        """Run ``self(*args, **kwargs)`` once the given delay has passed."""
        delay = delay_seconds(seconds=seconds, minutes=minutes, hours=hours, days=days, delta=delta)
        return api.enqueue(
            self, args, kwargs, delay=delay, key=key, on_conflict=on_conflict,
            on_commit=on_commit, durable=durable, limit_key=limit_key, expires=expires,
        )  # fmt: skip

    def delay_until(
        self,
        *args: Any,
        eta: datetime,
        key: str | None = None,
        on_conflict: api.OnConflict = "keep",
        on_commit: bool = True,
        durable: bool | None = None,
        limit_key: str | None = None,
        expires: float | timedelta | None = None,
        **kwargs: Any,
    ) -> api.Job:
        """Run ``self(*args, **kwargs)`` at ``eta`` (an aware datetime)."""
        return api.enqueue(
            self, args, kwargs, eta=eta, key=key, on_conflict=on_conflict,
            on_commit=on_commit, durable=durable, limit_key=limit_key, expires=expires,
        )  # fmt: skip

    def delay_many(
        self,
        calls: Iterable[Sequence[Any]],
        *,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        delta: timedelta | None = None,
        on_commit: bool = True,
        durable: bool | None = None,
    ) -> list[api.Job]:
        """Schedule one job per args tuple in ``calls``, all with the same delay, in one
        round trip."""
        return api.delay_many(
            self._many_specs(calls, seconds, minutes, hours, days, delta, durable),
            on_commit=on_commit,
        )

    def _many_specs(
        self,
        calls: Iterable[Sequence[Any]],
        seconds: float | None,
        minutes: float | None,
        hours: float | None,
        days: float | None,
        delta: timedelta | None,
        durable: bool | None,
    ) -> list[api.JobSpec]:
        """The checked jobs of ``delay_many`` and ``adelay_many``."""
        delay = delay_seconds(seconds=seconds, minutes=minutes, hours=hours, days=days, delta=delta)
        specs = api.spec_many(self, calls, delay=delay)
        if durable is not None:
            check_flag(durable, "durable")
            for s in specs:
                s.durable = durable
        return specs

    # ---- the defaulting the blocking and the awaited methods share ----------------------------

    def _durable(self, durable: bool | None) -> bool | None:
        """A move's durability: the call's, else the task's (else DURABLE decides)."""
        return self.dq_durable if durable is None else durable

    @staticmethod
    def _move_delay(
        eta: datetime | None,
        seconds: float | None,
        minutes: float | None,
        hours: float | None,
        days: float | None,
        delta: timedelta | None,
    ) -> float | timedelta | None:
        """A reschedule's delay; None when it gives ``eta``."""
        if eta is not None:
            return None
        return delay_seconds(seconds=seconds, minutes=minutes, hours=hours, days=days, delta=delta)

    def cancel(
        self, job_id: str | None = None, *, key: str | None = None, durable: bool | None = None
    ) -> bool:
        """Remove this task's scheduled job (by id or dedupe key); whether one was removed."""
        return api.cancel(self.delay_queue, job_id, key=key, durable=self._durable(durable))

    def reschedule(
        self,
        job_id: str | None = None,
        *,
        key: str | None = None,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        delta: timedelta | None = None,
        eta: datetime | None = None,
        durable: bool | None = None,
    ) -> api.Job | None:
        """Move a scheduled job to a new due time; None when it is no longer scheduled."""
        delay = self._move_delay(eta, seconds, minutes, hours, days, delta)
        return api.reschedule(
            self.delay_queue, job_id, key=key, delay=delay, eta=eta, durable=self._durable(durable)
        )

    # ---- the same on an event loop (delayqueue.producer.async_api): awaited, no thread --------

    async def adelay_for(
        self,
        *args: Any,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        delta: timedelta | None = None,
        key: str | None = None,
        on_conflict: api.OnConflict = "keep",
        on_commit: bool = True,
        durable: bool | None = None,
        limit_key: str | None = None,
        expires: float | timedelta | None = None,
        **kwargs: Any,
    ) -> api.Job:
        """``delay_for``, awaited on the running event loop."""
        delay = delay_seconds(seconds=seconds, minutes=minutes, hours=hours, days=days, delta=delta)
        return await async_api.aenqueue(
            self, args, kwargs, delay=delay, key=key, on_conflict=on_conflict,
            on_commit=on_commit, durable=durable, limit_key=limit_key, expires=expires,
        )  # fmt: skip

    async def adelay_until(
        self,
        *args: Any,
        eta: datetime,
        key: str | None = None,
        on_conflict: api.OnConflict = "keep",
        on_commit: bool = True,
        durable: bool | None = None,
        limit_key: str | None = None,
        expires: float | timedelta | None = None,
        **kwargs: Any,
    ) -> api.Job:
        """``delay_until``, awaited on the running event loop."""
        return await async_api.aenqueue(
            self, args, kwargs, eta=eta, key=key, on_conflict=on_conflict,
            on_commit=on_commit, durable=durable, limit_key=limit_key, expires=expires,
        )  # fmt: skip

    async def adelay_many(
        self,
        calls: Iterable[Sequence[Any]],
        *,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        delta: timedelta | None = None,
        on_commit: bool = True,
        durable: bool | None = None,
    ) -> list[api.Job]:
        """``delay_many``, awaited on the running event loop: one round trip."""
        return await async_api.adelay_many(
            self._many_specs(calls, seconds, minutes, hours, days, delta, durable),
            on_commit=on_commit,
        )

    async def acancel(
        self, job_id: str | None = None, *, key: str | None = None, durable: bool | None = None
    ) -> bool:
        """``cancel``, awaited on the running event loop."""
        return await async_api.acancel(
            self.delay_queue, job_id, key=key, durable=self._durable(durable)
        )

    async def areschedule(
        self,
        job_id: str | None = None,
        *,
        key: str | None = None,
        seconds: float | None = None,
        minutes: float | None = None,
        hours: float | None = None,
        days: float | None = None,
        delta: timedelta | None = None,
        eta: datetime | None = None,
        durable: bool | None = None,
    ) -> api.Job | None:
        """``reschedule``, awaited on the running event loop."""
        delay = self._move_delay(eta, seconds, minutes, hours, days, delta)
        return await async_api.areschedule(
            self.delay_queue, job_id, key=key, delay=delay, eta=eta, durable=self._durable(durable)
        )


@overload
def delayed_task(fn: Callable[..., Any], /) -> DelayedTask: ...
@overload
def delayed_task(
    *,
    queue: str | None = None,
    max_attempts: int | None = None,
    backoff: Backoff | None = None,
    visibility_timeout: float | None = None,
    batch: int | None = None,
    durable: bool | None = None,
    shards: int | None = None,
    rate: str | None = None,
    concurrency: int | None = None,
    expires: float | timedelta | None = None,
    **celery_options: Any,
) -> Callable[[Callable[..., Any]], DelayedTask]: ...
def delayed_task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    queue: str | None = None,
    max_attempts: int | None = None,
    backoff: Backoff | None = None,
    visibility_timeout: float | None = None,
    batch: int | None = None,
    durable: bool | None = None,
    shards: int | None = None,
    rate: str | None = None,
    concurrency: int | None = None,
    expires: float | timedelta | None = None,
    **celery_options: Any,
) -> DelayedTask | Callable[[Callable[..., Any]], DelayedTask]:
    """Make a plain function a Celery task that can also be run later:
    ``task.delay_for(...)``, ``task.delay_until(...)``, ``task.cancel(...)``,
    ``task.reschedule(...)``. ``task.delay()`` still runs it at once through Celery.

    queue: the delayqueue queue (default DELAYQUEUE["DEFAULT_QUEUE"]).
    max_attempts: runs before the job goes to dead (default DELAYQUEUE["MAX_ATTEMPTS"]).
    backoff: base seconds of the exponential retry backoff, or attempt -> seconds.
    visibility_timeout: seconds a run may take before the job is run again elsewhere.
    batch: due jobs handed to Celery per message, run one after another in one pool process,
    each acked or retried on its own (docs/design.md, "Batched hand-off"). 1: one job per
    message always. Unset: batches of up to 128 when 64 or more of the task's jobs are due at once,
    unless the task sets a Celery time or rate limit.
    durable: scheduling, cancelling and rescheduling its jobs wait until a replica has the
    write (Redis WAIT), else NotDurable (default DELAYQUEUE["DURABLE"]).
    shards: spread the task's queue over this many queues (on a cluster, over its masters);
    every task of the queue must say the same (or DELAYQUEUE["SHARDS"] says it once).
    rate ("N/s", "N/m", "N/h"), concurrency (jobs running at once), expires (seconds or a
    timedelta after the due time): limits that hold across the deployment, per task or per
    call's ``limit_key`` (docs/limits.md).
    Other keywords go to Celery's ``shared_task``.
    """
    options = task_options(
        queue, max_attempts, backoff, visibility_timeout, batch, durable, shards
    ) | limit_options(rate, concurrency, expires)

    def wrap(function: Callable[..., Any]) -> DelayedTask:
        if isinstance(function, Proxy | Task):  # (Celery's check looks for its exact Proxy)
            raise TypeError(
                "@delayed_task was applied to a task; apply it once, to the plain function, "
                "instead of @shared_task or @app.task"
            )
        if shards is not None:  # refused before the task exists: no half-made task
            declare(queue or str(get_settings().default_queue), shards)
        if options["dq_limits"]:
            declare_limited(queue or str(get_settings().default_queue))
        task = shared_task(base=DelayedTask, **options, **celery_options)(function)
        return cast(DelayedTask, per_app(task))

    return wrap(fn) if fn is not None else wrap
