"""Declaring periodic jobs: ``@periodic_task`` in code, ``DELAYQUEUE["SCHEDULES"]`` in
settings. Both check the rule at once (a bad cron line, an unknown timezone, a bad
``every`` raise InvalidOption where they are declared) and hand ``registry`` a declaration
whose occurrences are built by the producer API's own ``spec()``: the same checks of the
task, its arguments (JSON only, within MAX_PAYLOAD_BYTES) and its queue as any job's."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from delayqueue.conf import get_settings
from delayqueue.engine.limits import limits_arg
from delayqueue.engine.packing import without_trace
from delayqueue.errors import DelayQueueError, InvalidOption
from delayqueue.periodic import declarations
from delayqueue.periodic.rules import parse_rule
from delayqueue.producer.decorator import DelayedTask, delayed_task
from delayqueue.producer.job_spec import spec
from delayqueue.producer.task_options import checked_limits
from delayqueue.validators import shown


def _every_ms(every: float | timedelta | None) -> int | None:
    if every is None:
        return None
    seconds = every.total_seconds() if isinstance(every, timedelta) else every
    return round(float(seconds) * 1000)


def _declared(
    name: str,
    task: str,
    *,
    cron: str | None,
    every: float | timedelta | None,
    timezone: str | None,
    missed: object,
    source: declarations.Source,
    build: Callable[[], tuple[str, str, str]],
    monitor: object = False,
) -> declarations.Declared:
    declarations.check_name(name)
    rule = parse_rule(cron=cron, every=every, timezone=timezone)  # InvalidOption when bad
    return declarations.Declared(
        name=name,
        task=task,
        cron=cron,
        every_ms=_every_ms(every),
        timezone=rule.timezone,
        missed=declarations.check_missed(missed),
        source=source,
        build=build,
        monitor=declarations.check_monitor(monitor),
    )


def _builder(
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None,
    queue: str | None,
    limits: tuple[str | None, int | None, float | None] = (None, None, None),
) -> Callable[[], tuple[str, str, str]]:
    """The occurrences' (queue, packed spec, limits): the task's limits, or ``limits`` (rate,
    concurrency, expires) where a settings entry gives any."""
    own = checked_limits(*limits) if any(v is not None for v in limits) else None

    def build() -> tuple[str, str, str]:
        made = spec(task, args, kwargs, delay=0, queue=queue)
        packed = without_trace(made.packed)  # (every occurrence shares it)
        if own is None:
            return made.job.queue, packed, made.limits
        return made.job.queue, packed, limits_arg(own[0], "", own[1])

    return build


def periodic_task(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    cron: str | None = None,
    every: float | timedelta | None = None,
    timezone: str | None = None,
    name: str | None = None,
    missed: str = "once",
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    monitor: bool = False,
    **options: Any,
) -> Any:
    """A ``@delayed_task`` that also runs on a schedule, with no beat: ``cron`` (five fields,
    in ``timezone``, an IANA name, default UTC) or ``every`` (seconds or a timedelta,
    counted from the epoch). ``name`` (default: the task's name) identifies the schedule;
    ``missed`` says what happens to occurrences that came while every delay worker was down:
    "once" (one run for all of them), "all" (each, up to 100), "skip" (none). ``args`` and
    ``kwargs`` are each occurrence's arguments; ``monitor=True`` reports each occurrence to
    a Sentry cron monitor (docs/tracing.md); ``options`` are ``@delayed_task``'s (queue,
    max_attempts, backoff, visibility_timeout, ...)."""
    if name is not None:
        declarations.check_name(name)
    parse_rule(cron=cron, every=every, timezone=timezone)  # fails here, at the decorator
    declarations.check_missed(missed)
    declarations.check_monitor(monitor)
    if options.get("shards") is not None:
        raise InvalidOption("a periodic task's queue cannot be sharded (its schedule is one)")

    def wrap(function: Callable[..., Any]) -> DelayedTask:
        task = delayed_task(**options)(function)
        # Celery's own default name for a task: its module and its function's name
        task_name = options.get("name") or f"{function.__module__}.{function.__name__}"
        declarations.add(
            _declared(
                name or task_name,
                task_name,
                cron=cron,
                every=every,
                timezone=timezone,
                missed=missed,
                source="code",
                build=_builder(task_name, args, kwargs, options.get("queue")),
                monitor=monitor,
            )
        )
        return task

    return wrap(fn) if fn is not None else wrap


SETTING_KEYS = {
    "task", "cron", "every", "timezone", "args", "kwargs", "queue", "missed", "monitor",
    "rate", "concurrency", "expires",
}  # fmt: skip


def from_settings() -> list[declarations.Declared]:
    """``DELAYQUEUE["SCHEDULES"]``: name -> {"task": "...", "cron"/"every": ..., "timezone",
    "args", "kwargs", "queue", "missed"}. InvalidOption names the entry and what is wrong."""
    schedules = get_settings().schedules
    if not schedules:
        return []
    if not isinstance(schedules, Mapping):
        raise InvalidOption('DELAYQUEUE["SCHEDULES"] must be a dict of name -> schedule')
    found = []
    for name, entry in schedules.items():
        where = f'DELAYQUEUE["SCHEDULES"][{shown(name)}]'
        try:
            declarations.check_name(name)
        except InvalidOption as exc:
            raise InvalidOption(f"{where}: {exc}") from None
        if not isinstance(entry, Mapping):
            raise InvalidOption(f"{where} must be a dict")
        unknown = set(entry) - SETTING_KEYS
        if unknown:
            raise InvalidOption(f"{where} has unknown keys {sorted(unknown)}")
        task = entry.get("task")
        if not isinstance(task, str) or not task:
            raise InvalidOption(f"{where} needs 'task', a Celery task's name")
        try:
            found.append(
                _declared(
                    name,
                    task,
                    cron=entry.get("cron"),
                    every=entry.get("every"),
                    timezone=entry.get("timezone"),
                    missed=entry.get("missed", "once"),
                    source="settings",
                    build=_builder(
                        task,
                        entry.get("args", ()),
                        entry.get("kwargs"),
                        entry.get("queue"),
                        (entry.get("rate"), entry.get("concurrency"), entry.get("expires")),
                    ),
                    monitor=entry.get("monitor", False),
                )
            )
        except DelayQueueError as exc:
            raise InvalidOption(f"{where}: {exc}") from None
    return found


declarations.add_loader(from_settings)
