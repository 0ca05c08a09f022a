"""Handing claimed jobs to Celery: each job's Celery message is built and published, and
whatever one job's data does (not UTF-8, not JSON, too deep, an unknown task, a message the
publisher cannot encode) buries that job with a reason, never the batch or the worker. When
the broker refuses, the jobs not yet published go back to scheduled with a backoff."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from celery import Celery, Task

from delayqueue.engine.execution import run_all
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.record import utf8_safe
from delayqueue.errors import CorruptJob
from delayqueue.integrations import otel, trace_context
from delayqueue.observability import events, reported
from delayqueue.signals import SENDER_DELAY_WORKER
from delayqueue.wire import (
    HEADER_BATCH,
    HEADER_CLAIMED,
    HEADER_DUE,
    HEADER_ID,
    HEADER_QUEUE,
    HEADER_TOKEN,
    HEADER_VT,
    RUN_BATCH,
    RUN_TASK,
    BatchEntry,
    declared_priority,
    decode_args,
    is_delayed_task,
)
from delayqueue.worker.claimed import Claimed, bury, describe, describe_current
from delayqueue.worker.handoff import BACKLOG_FROM, FALLBACK, HandoffWatch, batch_size
from delayqueue.worker.publisher_choice import PublishError, TaskMessage, publisher_for

logger = logging.getLogger(__name__)


@dataclass
class Send:
    """One Celery message and the jobs it carries (one, or a batch's)."""

    jobs: list[Claimed]
    message: TaskMessage
    ack_on_publish: bool = False  # a plain task's job sent as itself (no Celery side for it)


class Dispatcher:
    """Publishes claimed jobs with the app's publisher (see publisher_choice.py) and counts them."""

    def __init__(self, app: Celery, worker_id: str | None = None) -> None:
        self.app = app
        self.publisher = publisher_for(app)
        self.watch = HandoffWatch(
            worker_id or f"{socket.gethostname()}:{os.getpid()}", _broker_shown(app)
        )
        # The delay worker's visibility timeout (ms), sent with each dispatch (HEADER_VT):
        # the Celery side's begin restarts the deadline from it, not from its own setting.
        self.visibility_ms: int | None = None
        self.dispatched = 0
        self.outage_backoff = 0.0  # seconds the jobs of a refused dispatch wait; doubles
        self._publishing = threading.Lock()  # the publisher is used by one thread at a time

    def close(self) -> None:
        self.publisher.close()

    def behind(self) -> bool:
        """Whether the last publish found the Celery workers behind (BACKLOG_FROM messages
        waiting on the broker's list)."""
        return self.publisher.waiting >= BACKLOG_FROM

    def warm_up(self) -> None:
        """Ready the publisher for the tasks delayqueue dispatches (made by @delayed_task)."""
        names = [name for name, task in self.app.tasks.items() if is_delayed_task(task)]
        with self._publishing:
            self.publisher.warm_up(names)
        self.watch.say_celery_sides()

    def warm_up_soon(self) -> threading.Thread:
        """``warm_up`` on a thread of its own: a broker that hangs holds up the first publish
        (which waits for it), not the worker's start, heartbeats and claims."""

        def run() -> None:
            # SIGTERM and SIGINT go to the main thread, which handles them: Linux hands a
            # process's second pending signal to another thread, and a main thread done
            # with a warm stop could exit before that thread made it known (no cold stop).
            if hasattr(signal, "pthread_sigmask"):  # (POSIX)
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
            try:
                self.warm_up()
            except Exception as exc:
                logger.warning("Celery broker not reachable yet (%s); dispatches will retry", exc)

        thread = threading.Thread(target=run, name="delayqueue-warm-up", daemon=True)
        thread.start()
        return thread

    def dispatch(self, jobs: list[Claimed]) -> None:
        """Hand claimed jobs to Celery. Jobs that can never run go to dead; when the broker
        refuses, the jobs not yet published go back to scheduled with a backoff. Jobs of a
        task that takes batches (``batch_size``) go several to a message."""
        self.maintain()
        handoff = self.watch.handoff
        sends: list[Send] = []
        batches: dict[tuple[str, str], list[tuple[Claimed, list[Any], dict[str, Any]]]] = {}
        counts = Counter(job.task for job in jobs)
        sizes: dict[str, int] = {}  # task -> jobs per message, for this dispatch
        decoded: list[tuple[Claimed, list[Any], dict[str, Any], Task[Any, Any]]] = []
        for job in jobs:
            try:
                decoded.append((job, *self._decode(job)))
            except Exception as exc:  # whatever one job's data does, it is that job's problem
                _bury_unsendable(job, exc)
        # Among the jobs of one pass (due together, or within DISPATCH_AHEAD of each other),
        # a task that declares a priority argument (wire.declared_priority) sends its
        # higher ones first; the sort is stable, so all else stays in due order.
        if any(declared_priority(target) for _, _, _, target in decoded):
            decoded.sort(key=_priority_of, reverse=True)
        for job, args, kwargs, target in decoded:
            try:
                size = sizes.get(job.task)
                if size is None:
                    waiting = self.publisher.waiting
                    may_batch = handoff.may_batch(job.task)
                    size = batch_size(target, counts[job.task], waiting, may_batch)
                    sizes[job.task] = size
                if size > 1:
                    pending = batches.setdefault((job.queue, job.task), [])
                    pending.append((job, args, kwargs))
                    if len(pending) >= size:
                        sends.append(self._batch(batches.pop((job.queue, job.task))))
                    continue
                sends.append(self._single(job, args, kwargs, target))
            except Exception as exc:  # whatever one job's data does, it is that job's problem
                _bury_unsendable(job, exc)
        sends += [self._batch(pending) for pending in batches.values()]
        if sends:
            self._publish(sends)

    def _decode(self, job: Claimed) -> tuple[list[Any], dict[str, Any], Task[Any, Any]]:
        args, kwargs = decode_args(job.args_json, job.kwargs_json)
        target = self.app.tasks.get(job.task)
        if target is None:
            raise CorruptJob(f"unknown task {job.task!r}: no Celery task has this name")
        return args, kwargs, target

    def maintain(self) -> None:
        """Read the hand-off fallbacks when due, and look at the watched dispatches
        (worker/handoff.py): from each pass that dispatches, and from the worker's
        heartbeat."""
        self.watch.current()

        def backlog() -> int | None:
            with self._publishing:
                return self.publisher.backlog()

        self.watch.check(backlog)

    def _single(
        self, job: Claimed, args: list[Any], kwargs: dict[str, Any], target: Task[Any, Any]
    ) -> Send:
        """One job's message: a @delayed_task's own, or a plain task's through run_task (as
        the task's own message, acked once published, where run_task was found discarded)."""
        headers = {HEADER_QUEUE: job.queue, HEADER_ID: job.id, HEADER_TOKEN: job.token}
        if job.claimed_ms is not None:
            headers[HEADER_CLAIMED] = str(job.claimed_ms)
        if job.due_ms is not None:
            headers[HEADER_DUE] = str(job.due_ms)
        if self.visibility_ms is not None:
            headers[HEADER_VT] = str(self.visibility_ms)
        if job.trace:
            headers.update(trace_context.dispatch_headers(job.trace))
        if is_delayed_task(target):
            return Send([job], TaskMessage(job.task, args, kwargs, headers, job.task))
        if not self.watch.handoff.may_run_task(job.task):
            return Send([job], TaskMessage(job.task, args, kwargs, {}, job.task), True)
        message = TaskMessage(RUN_TASK, [job.task, args, kwargs], {}, headers, job.task)
        return Send([job], message)

    def _batch(self, pending: list[tuple[Claimed, list[Any], dict[str, Any]]]) -> Send:
        """One message for several jobs of one task on one queue (delayqueue/runner/batches.py)."""
        first = pending[0][0]
        entries = [
            BatchEntry(job.id, job.token, args, kwargs, job.due_ms).entry()
            for job, args, kwargs in pending
        ]
        headers = {HEADER_BATCH: str(len(entries))}
        headers.update(trace_context.batch_headers((job.id, job.trace) for job, _, _ in pending))
        if first.claimed_ms is not None:
            headers[HEADER_CLAIMED] = str(first.claimed_ms)
        dues = [due for due in (job.due_ms for job, _, _ in pending) if due is not None]
        if len(dues) == len(pending):  # its first job's (runner/held.py holds it until then)
            headers[HEADER_DUE] = str(min(dues))
        if self.visibility_ms is not None:
            headers[HEADER_VT] = str(self.visibility_ms)
        summary = f"[{first.queue!r}, {first.task!r}, <{len(entries)} jobs from {first.id}>]"
        message = TaskMessage(
            RUN_BATCH, [first.queue, first.task, entries], {}, headers, first.task, summary
        )
        return Send([job for job, _, _ in pending], message)

    def _publish(self, sends: list[Send]) -> bool:
        """Publish messages; False when the broker refused (the jobs not published go back
        to scheduled). A message the publisher cannot encode or route buries its own job
        (found by publishing one message at a time; a batch's jobs one by one), not the
        rest."""
        try:
            with self._publishing:
                self.publisher.publish([send.message for send in sends])
        except PublishError as exc:
            self._published(sends[: exc.published])
            self._broker_outage(
                [job for send in sends[exc.published :] for job in send.jobs], exc.cause
            )
            return False
        except Exception:
            if len(sends) == 1 and len(sends[0].jobs) == 1:
                job = sends[0].jobs[0]
                reason = f"cannot publish its Celery message: {describe_current()}"
                bury(job.queue, job.id, reason, job.task, job.attempt)
                return True
            singles = [one for send in sends for one in self._singles(send)]
            for index, send in enumerate(singles):
                if not self._publish([send]):
                    rest = [job for later in singles[index + 1 :] for job in later.jobs]
                    self._broker_outage(rest, RuntimeError("broker unavailable"))
                    return False
            return True
        self.outage_backoff = 0.0
        self._published(sends)
        return True

    def _published(self, sends: list[Send]) -> None:
        went = [job for send in sends for job in send.jobs]
        self.dispatched += len(went)
        otel.dispatched(went)
        events.dispatched_all(went)
        for send in sends:
            first = send.jobs[0]
            jobs = [(job.id, job.token) for job in send.jobs]
            if send.message.name in FALLBACK:  # (a form the watch looks at)
                celery_queue = self.publisher.queue_of(send.message)
                self.watch.sent(send.message.name, first.task, first.queue, jobs, celery_queue)
        handed_over = [job for send in sends if send.ack_on_publish for job in send.jobs]
        if handed_over:
            # Run by a Celery worker without delayqueue's side: nothing would ack them.
            acks = [reported.handed_over(queue_keys(j.queue), j.id, j.token) for j in handed_over]
            run_all(acks, strict=False)

    def _singles(self, send: Send) -> list[Send]:
        """``send`` as messages of one job each (a batch's jobs as their own messages)."""
        if len(send.jobs) == 1 and send.message.name != RUN_BATCH:
            return [send]
        singles = []
        for job in send.jobs:
            try:
                args, kwargs, target = self._decode(job)
                singles.append(self._single(job, args, kwargs, target))
            except Exception as exc:
                _bury_unsendable(job, exc)
        return singles

    def _broker_outage(self, jobs: list[Claimed], exc: BaseException) -> None:
        self.outage_backoff = min(30.0, max(1.0, self.outage_backoff * 2))
        logger.error(
            "Celery broker refused a dispatch (%s); %s jobs go back to scheduled for %.0f s",
            exc,
            len(jobs),
            self.outage_backoff,
        )
        if not jobs:
            return
        reason = utf8_safe(f"broker unavailable: {exc}"[:500])
        delay_ms = int(self.outage_backoff * 1000)
        releases = [
            reported.release(
                SENDER_DELAY_WORKER,
                queue_keys(job.queue),
                job.id,
                token=job.token,
                delay_ms=delay_ms,
                reason=reason,
            )
            for job in jobs
        ]
        run_all(releases, strict=False)


def _priority_of(item: tuple[Claimed, list[Any], dict[str, Any], Task[Any, Any]]) -> int:
    _, _, kwargs, target = item
    name = declared_priority(target)
    value = kwargs.get(name, 0) if name else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _broker_shown(app: Celery) -> str | None:
    """The app's broker as kombu shows it (no password): what Celery workers announce."""
    try:
        return str(app.connection_for_write().as_uri())
    except Exception:
        return None


def _bury_unsendable(job: Claimed, exc: Exception) -> None:
    """To dead, a job whose Celery message cannot be built from its data."""
    if isinstance(exc, CorruptJob):
        reason = f"corrupt job data: {exc}"
    else:
        reason = f"cannot build its Celery message: {describe(exc)}"
    bury(job.queue, job.id, reason, job.task, job.attempt)
