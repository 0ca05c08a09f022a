"""The forms a delay worker hands jobs to Celery in: how many jobs go to a message
(``batch_size``), and the watch that notices a form the Celery workers do not run.

``delayqueue.run_batch`` and ``delayqueue.run_task`` run only where delayqueue's own Celery
tasks are registered (delayqueue/tasks.py). Where a Celery worker discards them ("Received
unregistered task"), the jobs would sit in flight until reaped, a visibility timeout later,
and be sent the same way again. So while no Celery worker has said it runs them
(engine/presence.py), the first messages of each of these forms, per task, are watched until
one of them begins: one that has not begun START_CHECK_SECONDS after it was
published, while nothing waits on the broker's lists (the Celery workers took it and did
not start it), was discarded. Then the task falls back to a simpler form
(engine/presence.py: its batches become single messages, a plain task's run_task becomes
the task's own message), every delay worker is told through Redis, it is said once, and
the watched jobs go back to scheduled at once to be sent again in that form.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery import Task

from delayqueue.engine import presence
from delayqueue.engine.execution import run_all
from delayqueue.engine.keys import queue_keys
from delayqueue.errors import DelayQueueError
from delayqueue.observability import reported
from delayqueue.signals import SENDER_DELAY_WORKER
from delayqueue.wire import RUN_BATCH, RUN_TASK, declared_batch, is_delayed_task

logger = logging.getLogger("delayqueue.worker")

START_CHECK_SECONDS = 10.0  # a watched message not begun this long after its publish ...
BLIND_CHECK_SECONDS = 60.0  # ... or this long, where the broker cannot say what waits
RECHECK_SECONDS = 600.0  # a form seen running is watched again after this long
REFRESH_SECONDS = 5.0  # how often the fallbacks every delay worker shares are read
MAX_WATCHED_JOBS = 10_000  # per form and task; later messages are left to the reaper

# The watched forms, each with the form its task falls back to.
FALLBACK: dict[str, presence.Form] = {RUN_BATCH: "single", RUN_TASK: "plain"}


@dataclass
class _Sent:
    at: float  # time.monotonic() of its publish
    queue: str
    jobs: list[tuple[str, str]]  # (id, token)
    celery_queue: str | None = None  # the Celery queue it went to, when the publisher knows


@dataclass
class _Watch:
    sent: list[_Sent] = field(default_factory=list)
    jobs: int = 0


class HandoffWatch:
    """The current fallbacks, and the messages of the watched forms not yet seen to run."""

    def __init__(self, worker_id: str, broker: str | None = None) -> None:
        self.worker_id = worker_id
        self.broker = broker  # the Celery broker the delay worker publishes to (no password)
        self.handoff = presence.Handoff()
        self._read_at = -math.inf
        self._watching: dict[tuple[str, str], _Watch] = {}  # (form, task) -> messages
        self._seen_running: dict[tuple[str, str], float] = {}  # (form, task) -> monotonic
        self._said: set[tuple[str, str]] = set()

    def current(self) -> presence.Handoff:
        """The fallbacks and Celery sides, read again every REFRESH_SECONDS."""
        now = time.monotonic()
        if now - self._read_at >= REFRESH_SECONDS:
            self._read_at = now
            try:
                self.handoff = presence.read_handoff()
            except DelayQueueError as exc:  # Redis down: the last ones known hold
                logger.debug("cannot read the hand-off fallbacks: %s", exc)
            self._say_fallbacks()
        return self.handoff

    def _say_fallbacks(self) -> None:
        for task, fallback in self.handoff.fallbacks.items():
            if (task, fallback.form) not in self._said:
                self._said.add((task, fallback.form))
                logger.warning(
                    "jobs of %s are handed to Celery %s: %s",
                    task,
                    "one to a message"
                    if fallback.form == "single"
                    else "as the task's own message, acked when published (no retries, no "
                    "dead letters)",
                    fallback.reason,
                )
        for side in self.handoff.other_protocols:
            key = (side.hostname, f"protocol {side.protocol}")
            if key not in self._said:
                self._said.add(key)
                logger.warning(
                    "Celery worker %s runs delayqueue's wire protocol %s, not %s (another "
                    "delayqueue version): no batches are sent while it runs",
                    side.hostname,
                    side.protocol,
                    presence.WIRE_PROTOCOL,
                )

    def say_celery_sides(self) -> None:
        """The start-up line: which Celery workers said they run delayqueue's messages."""
        sides = [s for s in self.current().fresh_sides() if s.consumes(self.broker, None)]
        if sides:
            logger.info(
                "Celery workers that run delayqueue's messages: %s",
                ", ".join(f"{side.hostname} (protocol {side.protocol})" for side in sides),
            )
            return
        logger.warning(
            "no Celery worker has said it runs delayqueue's messages (yet). A Celery worker "
            "says so when it starts, once delayqueue's tasks are in its app: keep 'delayqueue' "
            "in INSTALLED_APPS with Celery's Django set-up, or import delayqueue.tasks in the "
            "module that makes the Celery app. Jobs are sent all the same; a batch or "
            "run_task message a Celery worker discards is noticed within %.0f s and its task "
            "falls back to a form that runs",
            START_CHECK_SECONDS + REFRESH_SECONDS,
        )

    def sent(
        self,
        form: str,
        task: str,
        queue: str,
        jobs: list[tuple[str, str]],
        celery_queue: str | None = None,
    ) -> None:
        """A message of a watched form was published (to ``celery_queue``, when known)."""
        if form not in FALLBACK or self.handoff.celery_side_known(self.broker, celery_queue):
            return
        key = (form, task)
        now = time.monotonic()
        if now - self._seen_running.get(key, -math.inf) < RECHECK_SECONDS:
            return
        watch = self._watching.setdefault(key, _Watch())
        if watch.jobs >= MAX_WATCHED_JOBS:
            return
        watch.sent.append(_Sent(now, queue, jobs, celery_queue))
        watch.jobs += len(jobs)

    def check(self, backlog: Callable[[], int | None]) -> None:
        """Look at the oldest watched message of each form and task that is due for a look;
        fall back where one was discarded. ``backlog()``: messages waiting on the broker."""
        now = time.monotonic()
        due = [
            (key, watch.sent[0])
            for key, watch in self._watching.items()
            if watch.sent and now - watch.sent[0].at >= START_CHECK_SECONDS
        ]
        if not due:
            return
        try:
            begun = presence.dispatches_begun([(sent.queue, *sent.jobs[0]) for _, sent in due])
        except DelayQueueError as exc:
            logger.debug("cannot look at the watched dispatches: %s", exc)
            return
        waiting: int | None | bool = False  # (False: not asked yet)
        for (key, sent), state in zip(due, begun, strict=True):
            watch = self._watching[key]
            if state is True:  # the form runs there
                self._seen_running[key] = now
                del self._watching[key]
                continue
            if state is None:  # that job moved on; look at the next message later
                watch.sent.pop(0)
                watch.jobs -= len(sent.jobs)
                if not watch.sent:
                    del self._watching[key]
                continue
            if self.handoff.celery_side_known(self.broker, sent.celery_queue):
                # A Celery worker that runs both forms consumes that queue: a message not
                # begun yet waits behind long tasks (prefetched), it was not discarded.
                continue
            if waiting is False:
                waiting = backlog()
            if waiting is None and now - sent.at < BLIND_CHECK_SECONDS:
                continue
            if waiting:  # still waiting behind others on the broker
                continue
            self._fall_back(key, now - sent.at)

    def _fall_back(self, key: tuple[str, str], age: float) -> None:
        form, task = key
        watch = self._watching.pop(key)
        reason = (
            f"a {form} message published {age:.0f} s ago was taken off the broker and not "
            f"started (the Celery worker does not run {form}: import delayqueue's tasks in "
            "the Celery app, e.g. add 'delayqueue' to INSTALLED_APPS with the Django fixup, "
            "or import delayqueue.tasks in the app's module)"
        )
        try:
            presence.fall_back(task, FALLBACK[form], reason, self.worker_id)
            releases = [
                reported.release(
                    SENDER_DELAY_WORKER,
                    queue_keys(sent.queue),
                    job_id,
                    token=token,
                    delay_ms=0,
                    reason=f"sent again: {reason}"[:500],
                    unless_begun=True,
                )
                for sent in watch.sent
                for job_id, token in sent.jobs
            ]
            run_all(releases, strict=False)
        except DelayQueueError as exc:
            logger.error("%s; could not note it or send its jobs again (%s)", reason, exc)
            return
        self._read_at = -math.inf  # read the fallback back, and say it
        self.current()


# ---- jobs per message ----------------------------------------------------------------

AUTO_BATCH_FROM = 64  # jobs of one task in one pass before an automatic batch is made
AUTO_BATCH_SIZE = 128  # most jobs per automatic batch message
AUTO_BATCH_SPLIT = 4  # least messages a pass's jobs of one task are spread over
BACKLOG_FROM = 4  # messages found waiting on the broker's list that make every pass batch
BACKLOG_BATCH_SIZE = 500  # most jobs per automatic batch message while the broker is behind


def batch_size(
    target: Task[Any, Any], claimed: int, waiting: int = 0, may_batch: bool = True
) -> int:
    """Jobs per message for ``target``, of which ``claimed`` were claimed in this pass, with
    ``waiting`` messages found on the broker's list at the last publish. ``may_batch``:
    False where the task's batches were found discarded (worker/handoff.py) or a Celery
    worker of another delayqueue version runs: one job to a message, whatever the task says.

    ``@delayed_task(batch=N)``: N (1: never batched). Left unset ("auto"), batches under a
    backlog, never when the task sets a Celery time or rate limit (a batch could not honour
    them per job):
    - a backlog in the broker (BACKLOG_FROM messages found waiting by the last publish: the
      Celery workers, which take their prefetch off the list, are behind): the pass's jobs
      of the task in one message, up to BACKLOG_BATCH_SIZE. Each message costs the Celery
      worker its own work (its main process takes it off the list, decodes it and, with
      kombu's ack emulation, records and removes it; its pool process runs Celery's task
      machinery), so fewer, fuller messages drain a backlog faster; and spreading a pass
      over several messages would gain nothing, as every pool process already has
      messages waiting;
    - a backlog of due jobs (AUTO_BATCH_FROM of the task in one pass, the broker not
      behind): batches of up to AUTO_BATCH_SIZE, over at least AUTO_BATCH_SPLIT messages
      (so several pool processes share them).
    Measured in docs/design.md, "Batched hand-off"."""
    if not is_delayed_task(target) or not may_batch:
        return 1
    declared = declared_batch(target)
    if declared is not None:
        return declared
    if claimed < 2 or _has_limits(target):
        return 1
    if waiting >= BACKLOG_FROM:
        return min(BACKLOG_BATCH_SIZE, claimed)
    if claimed >= AUTO_BATCH_FROM:
        return min(AUTO_BATCH_SIZE, -(-claimed // AUTO_BATCH_SPLIT))
    return 1


def _has_limits(target: Task[Any, Any]) -> bool:
    conf = target.app.conf
    return any(
        value is not None
        for value in (
            target.time_limit,
            target.soft_time_limit,
            target.rate_limit,
            conf.task_time_limit,
            conf.task_soft_time_limit,
            conf.task_default_rate_limit,
        )
    )
