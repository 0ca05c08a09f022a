"""The delay worker: moves due jobs to Celery at their due time, and nothing is lost.

Each pass: reap expired in-flight jobs and claim a batch of due jobs (both scripts, all
queues, one round trip) -> dispatch each claimed job to Celery -> sleep until the earliest
of: next due time, next in-flight deadline, a message on a queue's wake channel, the safety
poll. All times come from Redis's clock; the worker only measures durations.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from celery import Celery
from ulid import ULID

from delayqueue.celery_app import get_celery_app
from delayqueue.conf import get_settings
from delayqueue.engine import roster, transitions
from delayqueue.engine.execution import run_many
from delayqueue.engine.keys import check_queue_name, queue_keys
from delayqueue.engine.reads import redis_now
from delayqueue.engine.redis_errors import redis_errors
from delayqueue.engine.shards import shard_names
from delayqueue.engine.transitions import ScriptCall
from delayqueue.engine.wake import WakeChannels, WakeLost
from delayqueue.errors import DelayQueueError, RedisUnavailable
from delayqueue.observability import reported
from delayqueue.periodic import planner
from delayqueue.validators import (
    check_claim_size,
    check_dispatch_ahead,
    check_visibility_timeout,
)
from delayqueue.worker import periodic
from delayqueue.worker.claimed import Claimed, decode_claimed
from delayqueue.worker.clock import RedisClock
from delayqueue.worker.dispatch import Dispatcher
from delayqueue.worker.publisher_choice import Publisher
from delayqueue.worker.served_queues import say_once, served_queues
from delayqueue.worker.stop_signals import install_stop_handlers

logger = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 5.0
# Each queue is reaped at least this often, whatever deadlines its claims report (braces).
REAP_AT_LEAST_EVERY = 1.0
HEALTH_EVERY = 1.0  # the health file (--health-file) is touched after a pass at most this often


@dataclass
class PassResult:
    """What one reap+claim pass saw, in Redis's clock."""

    claimed: list[Claimed] = field(default_factory=list)
    full: bool = False
    wait_ms: float = 0.0  # from Redis's reply until the next due time or deadline
    wake_at: float = 0.0  # the next due time or deadline as a time.monotonic()


FIRST_CLAIM = 16  # jobs claimed per queue by the first pass after a wait
BEHIND_PAUSE = 0.02  # seconds between passes while the Celery workers are behind


class DelayWorker:
    def __init__(
        self,
        queues: list[str] | None = None,
        *,
        claim_size: int | None = None,
        visibility_timeout: float | None = None,
        celery_app: Celery | None = None,
        health_file: str | Path | None = None,
    ) -> None:
        config = get_settings()
        # a sharded queue's name is all its shards; a shard's own name, that one
        self.fixed_queues = (
            [shard for q in queues for shard in shard_names(check_queue_name(q))]
            if queues
            else None
        )
        self.queues: list[str] = list(self.fixed_queues or [])
        self.claim_size = check_claim_size(
            claim_size if claim_size is not None else config.claim_size
        )
        timeout = (
            visibility_timeout if visibility_timeout is not None else config.visibility_timeout
        )
        self.visibility_ms = round(check_visibility_timeout(timeout) * 1000)
        self.safety_poll = float(config.safety_poll)
        # Jobs due within this many ms are claimed too; the Celery side holds each until its
        # due time (attempt.hold_until_due), so the hops are paid before it.
        self.ahead_ms = round(check_dispatch_ahead(config.dispatch_ahead, "DISPATCH_AHEAD") * 1000)
        self.app = celery_app or get_celery_app()
        self.dispatcher = Dispatcher(self.app)
        self.dispatcher.visibility_ms = self.visibility_ms
        self.id = f"{socket.gethostname()}:{os.getpid()}:{str(ULID())[-6:]}"
        self.stopping = False
        self._last_heartbeat = 0.0
        self.wake = WakeChannels()
        self.clock = RedisClock()
        # Jobs a pass claims per queue: the claim size, or less after a wait (``run`` sets it).
        self.claim_limit = self.claim_size
        # queue -> (its next in-flight deadline as a time.monotonic(), when it was last reaped)
        self._reap_state: dict[str, tuple[float, float]] = {}
        self.health_file = Path(health_file) if health_file is not None else None
        self._health_touched = -math.inf
        self._health_failed = False
        # the queues that hold periodic schedules (read at each heartbeat)
        self.schedule_queues: list[str] = []

    # ---- lifecycle -------------------------------------------------------------------

    def run(self, *, once: bool = False) -> int:
        """Loop until a signal asks to stop (or one drain with ``once``); exit code 0, or 1
        for a drain that could not reach Redis (a loop retries every second instead)."""
        self.app.loader.import_default_modules()  # every task the Celery worker knows
        self.reconcile_schedules()
        if not once:
            install_stop_handlers(self)
        logger.info("delay worker %s starting (claims %s)", self.id, self.claim_size)
        self.dispatcher.warm_up_soon()  # the first due job does not wait for the broker
        self._touch_health()
        try:
            while not self.stopping:
                self._heartbeat()
                try:
                    if once and not self.queues:
                        self._reachable()  # nothing to claim: Redis must still answer
                    result = self.run_pass()
                except DelayQueueError as exc:  # Redis down, or refusing writes
                    if once:  # a drain that cannot run says so and fails, not waits
                        logger.error("%s; nothing was dispatched", exc)
                        return 1
                    logger.error("%s; retrying in 1 s", exc)
                    self._sleep(1.0)
                    continue
                except Exception:  # a bug must not stop the worker: what it claimed is reaped
                    logger.exception("delay worker pass failed; retrying in 1 s")
                    self._sleep(1.0)
                    continue
                self._touch_health()
                # After a wait, claims grow from FIRST_CLAIM (doubling per full pass): the
                # first jobs of a burst leave at once, and no large claim holds Redis while
                # the Celery side begins them.
                full = min(self.claim_size, self.claim_limit * 2)
                self.claim_limit = full if result.full else FIRST_CLAIM
                if once:
                    if not result.full:
                        break
                    continue
                if not result.full:
                    wait = result.wake_at - time.monotonic()
                    if result.claimed and self.dispatcher.behind():
                        # The Celery workers are behind: jobs claimed now would only wait on
                        # the broker's list, so gather a few ms of them into fuller batches.
                        wait = max(wait, BEHIND_PAUSE)
                    self._sleep(wait)
        finally:
            self._goodbye()
        logger.info("delay worker %s stopped after %s dispatches", self.id, self.dispatched)
        return 0

    def reconcile_schedules(self) -> planner.Reconciled | None:
        """Plan the declared periodic schedules; None when Redis could not be asked."""
        return periodic.reconcile()

    @staticmethod
    def _reachable() -> None:
        """Raise RedisUnavailable (or the error Redis gives) unless Redis answers."""
        redis_now()

    # ---- one pass --------------------------------------------------------------------

    def run_pass(self) -> PassResult:
        """Reap and claim on every queue in one round trip, then dispatch what was claimed."""
        started = time.monotonic()
        if self.schedule_queues:
            periodic.fire(self.schedule_queues, self.ahead_ms)
        plan = self._plan_pass(started)
        if not plan:
            return PassResult(wait_ms=self.safety_poll * 1000, wake_at=started + self.safety_poll)
        calls = [call for _, _, queue_calls in plan for call in queue_calls]
        replies = iter(run_many(calls, as_bytes=True))
        # Redis read ``now`` (floored to the ms) before this: waking ``point - now`` ms after
        # it is never before ``point`` (``wait_ms``); ``self.clock`` wakes closer to ``point``.
        # Either way the time spent dispatching is not added on top.
        replied = time.monotonic()
        result = PassResult(wait_ms=self.safety_poll * 1000)
        points: list[tuple[int, int]] = []  # (point, Redis's now when it was read)
        for queue, reaping, queue_calls in plan:
            queue_replies = [next(replies) for _ in queue_calls]
            # One queue's error (a key of the wrong type, a script refusing its data) is that
            # queue's problem: the other queues' claims stand and are dispatched. A reap that
            # failed never costs the claim beside it: claimed jobs are always dispatched.
            if reaping:
                reaped = queue_replies[0]
                if isinstance(reaped, DelayQueueError):
                    self._queue_failed(queue, reaped, started)
            claim = queue_replies[-1]
            if isinstance(claim, DelayQueueError):
                self._queue_failed(queue, claim, started)
                continue
            points += self._note_claim(queue, claim, started, reaping, replied, result)
            for raw in claim.jobs:
                job = decode_claimed(queue, raw, claim.now_ms)
                if job is not None:
                    result.claimed.append(job)
        result.wake_at = self._wake_at(points, replied) if points else replied + self.safety_poll
        if result.claimed:
            self.dispatch(result.claimed)
        return result

    def _plan_pass(self, started: float) -> list[tuple[str, bool, list[ScriptCall[Any]]]]:
        """Per queue: whether it is reaped this pass, and its calls (reap, then claim).

        A queue is reaped when its next in-flight deadline (which the previous claim
        reported) has come, or at least every REAP_AT_LEAST_EVERY seconds: reaping a queue
        whose deadlines all lie ahead finds nothing, and at 1,000 due jobs a second the worker
        passes about that often."""
        attempts = int(get_settings().max_attempts)
        plan: list[tuple[str, bool, list[ScriptCall[Any]]]] = []
        for queue in self.queues:
            keys = queue_keys(queue)
            deadline, reaped_at = self._reap_state.get(queue, (0.0, 0.0))
            reaping = deadline <= started or started - reaped_at >= REAP_AT_LEAST_EVERY
            calls: list[ScriptCall[Any]] = []
            if reaping:
                calls.append(reported.reap(keys, limit=self.claim_size, max_attempts=attempts))
            calls.append(
                reported.claim(
                    keys,
                    limit=self.claim_limit,
                    visibility_ms=self.visibility_ms,
                    ahead_ms=self.ahead_ms,
                )
            )
            plan.append((queue, reaping, calls))
        return plan

    def _note_claim(
        self,
        queue: str,
        claim: transitions.Claim,
        started: float,
        reaping: bool,
        replied: float,
        result: PassResult,
    ) -> list[tuple[int, int]]:
        """Learn from one queue's claim reply: Redis's clock, whether the batch was full, when
        the queue next needs the worker (due time, in-flight deadline). Returns those points."""
        self.clock.observe(claim.now_ms, replied)
        seen = len(claim.jobs) + claim.held + len(claim.expired)  # (held, expired: seen too)
        result.full = result.full or seen >= self.claim_limit
        # The next job is claimed ahead_ms before it is due.
        next_claim = None if claim.next_due_ms is None else claim.next_due_ms - self.ahead_ms
        points = [
            (point, claim.now_ms)
            for point in (next_claim, claim.next_deadline_ms)
            if point is not None
        ]
        for point, now in points:
            result.wait_ms = min(result.wait_ms, max(0, point - now))
        deadline = claim.next_deadline_ms
        self._reap_state[queue] = (
            self.clock.monotonic_at(deadline) if deadline is not None else float("inf"),
            started if reaping else self._reap_state[queue][1],
        )
        return points

    def _queue_failed(self, queue: str, exc: DelayQueueError, started: float) -> None:
        if isinstance(exc, RedisUnavailable):
            raise exc
        say_once(f"queue {queue}: {exc}; trying it again on later passes")
        self._reap_state[queue] = (started + REAP_AT_LEAST_EVERY, started)

    def _wake_at(self, points: list[tuple[int, int]], replied: float) -> float:
        """The monotonic time of the earliest point, by the clock estimate; never a busy loop:
        a point Redis has not reached though the estimate says it has (Redis's clock was set
        back) drops the estimate for this pass's bound."""
        wake_at = min(self.clock.monotonic_at(point) for point, _ in points)
        if wake_at <= replied and all(point > now for point, now in points):
            for _, now in points:
                self.clock.reset(now, replied)
            wake_at = min(self.clock.monotonic_at(point) for point, _ in points)
        return min(wake_at, replied + self.safety_poll)

    # ---- dispatch --------------------------------------------------------------------

    def dispatch(self, jobs: list[Claimed]) -> None:
        """Hand claimed jobs to Celery (see dispatch.py)."""
        self.dispatcher.dispatch(jobs)

    @property
    def dispatched(self) -> int:
        return self.dispatcher.dispatched

    @property
    def publisher(self) -> Publisher:
        return self.dispatcher.publisher

    # ---- sleeping, heartbeat, health file -------------------------------------------

    def _touch_health(self) -> None:
        """Touch the health file (for liveness probes): at start and after a pass that
        completed, at most every HEALTH_EVERY seconds. Its age is the time since the worker
        last completed a pass; the worker passes at least every SAFETY_POLL seconds."""
        if self.health_file is None:
            return
        now = time.monotonic()
        if now - self._health_touched < HEALTH_EVERY:
            return
        self._health_touched = now
        try:
            self.health_file.touch()
        except OSError as exc:
            if not self._health_failed:  # said once, not at every pass
                logger.error("cannot touch the health file %s: %s", self.health_file, exc)
            self._health_failed = True
        else:
            self._health_failed = False

    def _sleep(self, seconds: float) -> None:
        """Wait up to ``seconds`` on the wake channels; returns early on a wake message or a
        stop request (checked every 250 ms). A socket wait rounds its timeout up to a whole
        ms (poll(2)): the whole ms that fit are waited on the channel, the last fraction slept
        (a job that becomes due meanwhile is claimed at the end of it)."""
        deadline = time.monotonic() + max(0.0, seconds)
        while not self.stopping:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            if remaining < 0.001:
                time.sleep(remaining)
                return
            if not self.wake.listening:
                time.sleep(min(remaining, 0.25))
                continue
            whole_ms = math.floor(min(remaining, 0.25) * 1000) / 1000 - 1e-6
            try:
                if self.wake.wait(whole_ms):
                    return
            except WakeLost as exc:
                logger.warning("wake channel lost (%s); sleeping without it", exc)
                return

    def _heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_heartbeat < HEARTBEAT_SECONDS:
            return
        self._last_heartbeat = now
        try:
            with redis_errors():
                self._refresh_queues()
                self.schedule_queues = periodic.queues_with_schedules(self.queues)
            roster.record_heartbeat(self.id, self.queues, self.dispatched)
        except DelayQueueError as exc:
            logger.error("heartbeat failed: %s", exc)
        # the hand-off forms' watch, also when no pass dispatches (worker/handoff.py)
        self.dispatcher.maintain()

    def _refresh_queues(self) -> None:
        if self.fixed_queues is None:
            self.queues = served_queues(self.app)
        self.wake.listen(self.queues)

    def _goodbye(self) -> None:
        try:
            roster.remove_worker(self.id)
        except (RedisUnavailable, OSError):
            pass  # the heartbeat key expires on its own
        self.close()

    def close(self) -> None:
        """Close the connections of this worker's own: the wake channel's and the
        publisher's (``run`` does when it stops)."""
        self.wake.close()
        self.dispatcher.close()
