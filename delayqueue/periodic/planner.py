"""What a delay worker does for periodic jobs: reconcile Redis with the declared schedules
when it starts, and move each schedule on to its next occurrence when the current one comes
due (``fire_due``, every pass, for the queues that hold schedules).

Every step is one script that checks what it was based on (the schedule's next occurrence
as read): any number of delay workers may take it at once and one of them moves it; a
worker killed anywhere leaves it for the next pass of any other. The occurrences are
ordinary jobs with ids made of the schedule's name and the instant (``identity``), so a
step that is run twice writes nothing twice."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from datetime import timedelta

from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine import schedules
from delayqueue.engine.clients import remember_queue
from delayqueue.engine.execution import run, run_many
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.reads import redis_now
from delayqueue.engine.roster import queue_names
from delayqueue.engine.schedule_record import ScheduleDeclaration, ScheduleRecord, is_instant
from delayqueue.engine.transitions import ScriptCall
from delayqueue.errors import DelayQueueError, InvalidOption, RedisUnavailable
from delayqueue.integrations import otel
from delayqueue.observability import events
from delayqueue.periodic import declarations
from delayqueue.periodic.identity import occurrence_id
from delayqueue.periodic.rules import Rule, missed_between, parse_rule
from delayqueue.validators import shown

logger = logging.getLogger(__name__)

# What one schedule's record can raise when it is read or moved on: a number of the wrong
# kind, an instant past what a datetime or a job id holds, a rule that is no rule. Each is
# that schedule's problem (RedisUnavailable, which is every schedule's, is raised on).
RECORD_ERRORS = (DelayQueueError, ValueError, ArithmeticError, TypeError)

# missed="all": at most this many occurrences that came while every worker was down are
# run; the earlier ones are counted as missed.
MISSED_ALL_LIMIT = 100
# missed="skip": an occurrence found due later than this (or than its period, if shorter)
# is not run.
SKIP_AFTER_MS = 60_000


def rule_of(record: ScheduleRecord) -> Rule:
    """The rule a schedule's record holds (any process can fire any schedule)."""
    return _rule(record.cron, record.every_ms, record.timezone)


_rules: dict[tuple[str | None, str | None, str | None], Rule] = {}


def _rule(cron: str | None, every_ms: str | None, timezone: str | None) -> Rule:
    found = _rules.get((cron, every_ms, timezone))
    if found is None:
        if every_ms and not (every_ms.isascii() and every_ms.isdigit() and len(every_ms) <= 12):
            raise InvalidOption(f"its every_ms {shown(every_ms)} is not a period in ms")
        every = timedelta(milliseconds=int(every_ms)) if every_ms else None
        found = parse_rule(cron=cron or None, every=every, timezone=timezone)
        if len(_rules) < 10_000:
            _rules[(cron, every_ms, timezone)] = found
    return found


def fingerprint(declared: declarations.Declared, rule: Rule, spec: str) -> str:
    """Changes when the rule, its timezone, the missed policy or the occurrences' spec do."""
    text = "\n".join([rule.fingerprint(), declared.missed, spec])
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


@dataclass
class Reconciled:
    planned: list[str] = field(default_factory=list)  # created or re-planned
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # name -> why


def reconcile() -> Reconciled:
    """Upsert every declared schedule by name, and remove the schedules Redis holds that are
    declared no more. A schedule whose rule, missed policy and spec are unchanged is left as
    it is (paused stays paused); a changed one is re-planned from its last run or now,
    whichever is later, so the occurrence that is running is not run twice. A schedule
    that cannot be planned (a bad declaration, a record no build wrote) is ``failed``, and
    the others are planned."""
    result = Reconciled()
    now = redis_now()
    planned: list[tuple[declarations.Declared, str, str, str, Rule]] = []
    names: set[str] = set()
    for item in declarations.declared():
        if item.name in names:
            result.failed[item.name] = "declared twice (delayqueue.E020)"
            continue
        names.add(item.name)
        try:
            queue, spec, limits = item.build()
            every = str(item.every_ms) if item.every_ms else None
            rule = _rule(item.cron, every, item.timezone)
            planned.append((item, queue, spec, limits, rule))
        except RedisUnavailable:
            raise
        except RECORD_ERRORS as exc:
            _not_planned(result, item.name, exc)
    known = sorted(set(queue_names().names) | {queue for _, queue, _, _, _ in planned})
    stored: dict[str, list[ScheduleRecord]] = {}
    for queue in known:
        for found in _stored_on(queue):
            stored.setdefault(found.name, []).append(found)
    for item, queue, spec, limits, rule in planned:
        try:
            _upsert(item, queue, (spec, limits), rule, now, stored.pop(item.name, []), result)
        except RedisUnavailable:
            raise
        except RECORD_ERRORS as exc:
            _not_planned(result, item.name, exc)
    for name, gone in stored.items():
        if name in result.failed:  # declared, but not plannable now: left as it is
            continue
        for found in gone:
            run(schedules.unplan(queue_keys(found.queue), name, "remove"))
            result.removed.append(name)
            logger.warning("schedule %s on %s is declared no more: removed", name, found.queue)
    return result


def _not_planned(result: Reconciled, name: str, exc: BaseException) -> None:
    result.failed[name] = str(exc)
    logger.error("schedule %s cannot be planned: %s", name, exc)


def _stored_on(queue: str) -> list[ScheduleRecord]:
    """The schedules ``queue`` holds; none when its schedules cannot be read (a key of the
    wrong type), which is said."""
    try:
        return schedules.stored(queue)
    except RedisUnavailable:
        raise
    except DelayQueueError as exc:
        logger.error("the schedules of queue %s cannot be read: %s", queue, exc)
        return []


def _upsert(
    item: declarations.Declared,
    queue: str,
    made: tuple[str, str],  # the occurrences' packed spec, and their limits (or "")
    rule: Rule,
    now: int,
    found: list[ScheduleRecord],
    result: Reconciled,
) -> None:
    spec, limits = made
    print_ = fingerprint(item, rule, f"{spec}\n{limits}" if limits else spec)
    for stored in found:
        if stored.queue != queue:  # moved to another queue: the old one goes
            run(schedules.unplan(queue_keys(stored.queue), item.name, "remove"))
    current = next((s for s in found if s.queue == queue), None)
    declared = ScheduleDeclaration(
        task=item.task,
        rule=rule.written,
        cron=item.cron or "",
        every_ms=str(item.every_ms or ""),
        timezone=rule.timezone,
        fingerprint=print_,
        missed=item.missed,
        source=item.source,
        limits=limits,
    )
    for _ in range(PLAN_TRIES):
        if current is not None and current.fingerprint == print_:
            # (a next occurrence that is no instant, planted or left behind, is planned again)
            planned_well = is_instant(current.next_ms)
            if current.paused or (current.job and planned_well):
                result.unchanged.append(item.name)
                return
        last = (current.last_ms or 0) if current is not None else 0
        next_ms = rule.next_after(max(now, last))
        remember_queue(queue)
        seen = current.job if current is not None else None
        if run(plan_call(queue, item.name, next_ms, spec, declared, seen)).planned:
            if current is not None and current.paused:  # a changed paused schedule stays paused
                run(schedules.unplan(queue_keys(queue), item.name, "pause"))
            result.planned.append(item.name)
            return
        # Another worker planned it or moved it on since it was read (workers starting
        # together): read it again, and plan from that.
        current = next(iter(schedules.stored(queue, item.name)), None)
        now = redis_now()
    raise InvalidOption(f"its record changed {PLAN_TRIES} times while it was planned")


# Plans of one schedule at a worker's start before it gives up (each try reads the record
# anew: only another writer on every try makes them all fail).
PLAN_TRIES = 5


def plan_call(
    queue: str,
    name: str,
    next_ms: int,
    spec: str,
    declared: ScheduleDeclaration | None,
    seen: str | None,
) -> ScriptCall[schedules.Planned]:
    """Plan the occurrence at ``next_ms`` if the record still plans the occurrence ``seen``
    (its job as read; None: no record, or paused); ``declared``: what the record says of
    the schedule (None: it keeps what it holds)."""
    return schedules.plan(
        queue_keys(queue),
        name,
        next_ms=next_ms,
        job_id=occurrence_id(name, next_ms),
        spec=spec,
        wake_horizon_ms=WAKE_HORIZON_MS,
        seen=seen,
        declared=declared,
    )


@dataclass(frozen=True)
class Tick:
    queue: str
    name: str
    at_ms: int  # the occurrence that came due
    job_id: str
    runs: bool
    missed: int  # occurrences counted as missed in this step
    lateness_ms: int  # now - at_ms when the step ran


def fire_due(queue: str, now_ms: int | None = None, ahead_ms: int = 0) -> list[Tick]:
    """Move every schedule of ``queue`` whose occurrence has come due on to its next one;
    the ticks this worker moved (another worker may have moved some first). ``ahead_ms``:
    the delay worker's DISPATCH_AHEAD, as its claim takes a job due that much later in the
    same pass: the occurrence it takes has come due for its schedule too. FIRE_CHUNK
    schedules at a time: their records in one round trip, their steps in another. A
    schedule whose record cannot move on stays where it is, said once (``cannot_move_on``),
    and the others move on."""
    now = redis_now() if now_ms is None else now_ms
    due = schedules.due(queue, now + ahead_ms)
    if not due:
        return []
    ticks: list[Tick] = []
    # (with OpenTelemetry, a span: each occurrence fired keeps its context, docs/tracing.md)
    with otel.firing(queue, len(due)) as step:
        for start in range(0, len(due), FIRE_CHUNK):
            ticks += _fire_chunk(queue, due[start : start + FIRE_CHUNK], now, step.context)
        step.fired(sum(tick.runs for tick in ticks))
    return ticks


# Schedules moved on per round trip (10,000 due at one minute are 20 of them).
FIRE_CHUNK = 500


@dataclass(frozen=True)
class _Step:
    name: str
    seen: int  # the occurrence that came due, as read
    missed: int
    call: ScriptCall[schedules.Fired]


def _fire_chunk(
    queue: str, chunk: list[tuple[str, int | None]], now: int, trace: str
) -> list[Tick]:
    found = schedules.records(queue, [name for name, _ in chunk])
    steps = []
    for (name, seen), stored in zip(chunk, found, strict=True):
        if stored is None or stored.next_ms != seen:  # removed, or moved on since
            continue
        try:
            steps.append(_step(stored, seen, now, trace))
        except RECORD_ERRORS as exc:  # a record another build (or no build) wrote
            cannot_move_on(queue, name, exc)
    ticks = []
    for step, fired in zip(steps, run_many([s.call for s in steps]), strict=True):
        if isinstance(fired, DelayQueueError):
            if isinstance(fired, RedisUnavailable):
                raise fired
            cannot_move_on(queue, step.name, fired)
            continue
        if not fired.fired:  # another worker moved it first
            continue
        tick = Tick(queue, step.name, step.seen, fired.job_id, fired.runs,
                    step.missed + (not fired.runs), now - step.seen)  # fmt: skip
        ticks.append(tick)
        events.tick(queue, step.name, tick.job_id, tick.at_ms, tick.lateness_ms, tick.runs,
                    tick.missed)  # fmt: skip
    return ticks


_said: set[str] = set()  # the problems said at ERROR already (bounded below)


def cannot_move_on(queue: str, name: str, exc: BaseException) -> None:
    """Say at ERROR, the first time this process meets it, that schedule ``name`` cannot
    move on and why (then at DEBUG: a bad record is due again at every pass)."""
    problem = f"schedule {name} on {queue} cannot move on: {exc}"
    if problem in _said:
        logger.debug("%s (again)", problem)
        return
    if len(_said) < 1_000:
        _said.add(problem)
    logger.error("%s", problem)


def _step(stored: ScheduleRecord, seen: int | None, now: int, trace: str = "") -> _Step:
    """The step that moves ``stored`` on from the occurrence at ``seen``, by its policy for
    the occurrences that came and went meanwhile; the occurrence that came due keeps the
    trace context ``trace``, if any."""
    if seen is None or not is_instant(seen):
        raise InvalidOption(f"its next occurrence ({seen} ms) is not an instant")
    rule = rule_of(stored)
    policy = stored.missed or "once"
    following = rule.next_after(seen)
    missed = 0
    skip = policy == "skip" and now - seen > min(SKIP_AFTER_MS, following - seen)
    if following <= now:  # occurrences came and went while no worker moved this one
        latest, total = missed_between(rule, seen, now, MISSED_ALL_LIMIT)
        if policy == "all":
            following, missed = latest[0], total - len(latest)
        else:
            following, missed = rule.next_after(now), total
    call = schedules.fire(
        queue_keys(stored.queue),
        stored.name,
        seen_ms=seen,
        next_ms=following,
        job_id=occurrence_id(stored.name, following),
        missed=missed,
        skip=skip,
        wake_horizon_ms=WAKE_HORIZON_MS,
        trace=trace,
    )
    return _Step(stored.name, seen, missed, call)
