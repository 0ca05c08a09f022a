"""delayqueue's own Celery tasks, and what a Celery worker does for delayqueue besides.

Registered with every Celery app, whatever its set-up: this module is imported by
``@delayed_task`` (delayqueue/producer/decorator.py) and by the Django app's ``ready()``, and
``shared_task`` adds its tasks to every app, made before or after. A Celery worker that runs
them says so in Redis (engine/presence.py), so delay workers send the forms that need them
(``run_batch``, ``run_task``) only where they run; a message of delayqueue's that a Celery
worker cannot run (an unknown task) is settled at once instead of waiting to be reaped."""

from __future__ import annotations

import gc
import logging
import os
import threading
from typing import Any

from celery import Task, shared_task
from celery.signals import (
    task_unknown,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)
from django.db import close_old_connections

from delayqueue.conf import get_settings
from delayqueue.engine import direct_pipeline, presence
from delayqueue.engine.execution import run, run_all, warm_up
from delayqueue.engine.keys import queue_keys
from delayqueue.engine.record import utf8_safe
from delayqueue.errors import DelayQueueError
from delayqueue.observability import reported
from delayqueue.runner import batches, riders
from delayqueue.runner.attempt import failure_call
from delayqueue.runner.held import HeldDispatches, in_process
from delayqueue.runner.job import dispatch_visibility_ms, run_job
from delayqueue.signals import SENDER_CELERY_WORKER
from delayqueue.wire import (
    HEADER_CLAIMED,
    HEADER_ID,
    HEADER_QUEUE,
    HEADER_TOKEN,
    RUN_BATCH,
    RUN_TASK,
    dispatch_from_headers,
    dispatch_headers,
    header_ms,
    valid_dispatch,
)

logger = logging.getLogger(__name__)


@worker_init.connect
def _hold_early_messages(sender: Any = None, **kwargs: Any) -> None:
    """The Celery worker's consumer holds a job's message that arrives ahead of its due
    time, not a pool slot (runner/held.py)."""
    app = getattr(sender, "app", None)
    if app is not None:
        app.steps["consumer"].add(HeldDispatches)


@worker_process_init.connect
def _warm_up_pool_process(**kwargs: Any) -> None:
    """A new Celery pool process registers delayqueue's scripts and connects to its Redis
    before its first job, not during it (about 10 ms the first job would wait)."""
    _warm_up()


@worker_ready.connect
def _warm_up_in_process_pool(sender: Any = None, **kwargs: Any) -> None:
    """The same for a pool that runs jobs in the worker's own process (``-P threads``,
    ``solo``, ``gevent``, ``eventlet``: no pool process starts, so no worker_process_init)."""
    if in_process(getattr(sender, "pool", None)):
        _warm_up()


def _warm_up() -> None:
    try:
        warm_up()
        direct_pipeline.warm_up()  # (the connection a job's begin and its ride go on)
    except Exception as exc:  # Redis down now: the first job connects, or says why
        logger.warning("delayqueue could not reach Redis yet: %s", exc)
    _freeze_start()


def _freeze_start() -> None:
    """What the process holds once it is ready for its first job (modules, classes, the
    Celery app and its tasks, settings, delayqueue's scripts and connection: about 110,000
    objects) is set aside from the garbage collector's full passes (``gc.freeze``): those
    go through what the jobs made since, not through the start's objects again each time
    (in a pool process draining a burst of Django tasks' jobs: two or three passes of 100
    to 130 ms every 10,000 jobs, 5 to 7% of its CPU; about 1 ms each once frozen;
    docs/design.md). A frozen object is still freed when its last reference goes; only a
    reference cycle among them that becomes garbage later is never collected, at most once
    each, a bounded amount. No collection runs first (it would hold up the first job, 0.2 s
    and more in a new pool process): the cycles already garbage then, about a hundred
    objects, stay. A project that would rather not freeze: ``FREEZE_PROCESS_START: False``."""
    if get_settings().freeze_process_start:
        gc.freeze()


@shared_task(name=RUN_TASK, bind=True)
def run_task(self: Task[Any, Any], name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run a job of a plain Celery task (one not made by @delayed_task) with delayqueue's
    bookkeeping: the fencing-token check, then ack or retry/dead."""
    target = self.app.tasks.get(name)
    dispatch = dispatch_headers(self.request)
    if target is None:
        if dispatch is not None:
            _fail_unknown(dispatch, name, str(self.request.hostname))
        logger.error("job of task %r not run: no Celery task has this name here", name)
        return None
    if dispatch is None:
        return target(*args, **kwargs)
    return run_job(target, args, kwargs, dispatch)


@shared_task(name=RUN_BATCH, bind=True, ignore_result=True)
def run_batch(self: Task[Any, Any], queue: str, task: str, entries: list[Any]) -> int:
    """Run the jobs of a batched hand-off (delayqueue/runner/batches.py) one after another, each
    with the task's own request context; how many succeeded."""
    if not isinstance(entries, list) or not isinstance(queue, str) or not isinstance(task, str):
        logger.error("batch of %r on %r not run: not a batch", task, queue)
        return 0
    target = self.app.tasks.get(task)
    if target is None:
        _unbatch_unknown(queue, task, entries, str(self.request.hostname))
        return 0
    request = self.request
    eager = bool(getattr(request, "is_eager", False))

    def call(job: batches.BatchJob) -> Any:
        # The job's own request, as a single dispatch would have it (its headers as
        # attributes: self.request.dq_id in a bound task).
        headers = {HEADER_QUEUE: queue, HEADER_ID: job.id, HEADER_TOKEN: job.token}
        target.push_request(
            id=job.id,
            args=job.args,
            kwargs=job.kwargs,
            delivery_info=request.delivery_info,
            hostname=request.hostname,
            called_directly=False,
            headers=headers,
            **headers,
        )
        try:
            return target.run(*job.args, **job.kwargs)
        finally:
            target.pop_request()
            if not eager:  # (an eager run is inside its caller's transaction: left alone)
                _close_old_connections(job.id)

    return batches.run_batch(
        call,
        queue,
        task,
        entries,
        claimed_ms=header_ms(request, HEADER_CLAIMED),
        backoff=getattr(target, "dq_backoff", None),
        visibility_timeout=getattr(target, "dq_visibility_timeout", None)
        or dispatch_visibility_ms(request) / 1000,
        rides=riders.of(target),
    )


def _close_old_connections(job_id: str) -> None:
    """Between a batch's jobs, what Celery's Django fixup does after each task of a worker:
    close the database connections that are broken or past their CONN_MAX_AGE. The job has
    run by then, so an error here is logged, never the job's failure (a retry would run it
    twice)."""
    try:
        close_old_connections()
    except Exception:
        logger.warning(
            "after job %s: closing old database connections failed", job_id, exc_info=True
        )


# ---- saying so: the Celery worker runs delayqueue's messages -------------------------------

_stop_announcing = threading.Event()
_announcer: threading.Thread | None = None


@worker_ready.connect
def _announce_while_running(sender: Any = None, **kwargs: Any) -> None:
    """From the Celery worker's main process once it consumes: say that this worker runs
    delayqueue's messages, again every ANNOUNCE_EVERY_SECONDS while it runs."""
    global _announcer
    if _announcer is not None and _announcer.is_alive():
        return
    hostname = str(getattr(sender, "hostname", None) or f"celery@{os.uname().nodename}")
    broker, queues = _consumed(sender)
    _stop_announcing.clear()

    def announce_every() -> None:
        quiet = False
        while not _stop_announcing.is_set():
            try:
                presence.announce(hostname, os.getpid(), broker, queues)
                quiet = False
            except Exception as exc:  # Redis down: said once, tried again
                if not quiet:
                    logger.warning("delayqueue: cannot announce this Celery worker (%s)", exc)
                quiet = True
            _stop_announcing.wait(presence.ANNOUNCE_EVERY_SECONDS)

    _announcer = threading.Thread(target=announce_every, name="delayqueue-announce", daemon=True)
    _announcer.start()
    logger.info("delayqueue: Celery worker %s runs delayqueue's messages", hostname)


def _consumed(consumer: Any) -> tuple[str | None, list[str]]:
    """The broker (as kombu shows it: no password) and the queues a worker consumes."""
    try:
        broker = str(consumer.app.connection_for_read().as_uri())
    except Exception:
        broker = None
    try:
        queues = sorted(str(queue.name) for queue in consumer.task_consumer.queues)
    except Exception:
        queues = []
    return broker, queues


@worker_shutdown.connect
def _withdraw(sender: Any = None, **kwargs: Any) -> None:
    if _announcer is None:
        return
    _stop_announcing.set()
    hostname = str(getattr(sender, "hostname", None) or "")
    if hostname:
        try:
            presence.withdraw(hostname)
        except Exception:  # Redis down: the announcement grows stale on its own
            pass


# ---- a message of delayqueue's this Celery worker cannot run ------------------------------


@task_unknown.connect
def _settle_unknown(
    sender: Any = None, message: Any = None, name: str | None = None, **kwargs: Any
) -> None:
    """Celery discards a message of a task it does not know. When it is a dispatch of a
    delayqueue job, say so now rather than let the job wait in flight to be reaped: a single
    job's attempt fails (retried with backoff, dead at its last attempt, with the reason); a
    batch's jobs go back to be sent one to a message."""
    hostname = str(getattr(sender, "hostname", None) or "a Celery worker")
    headers = getattr(message, "headers", None) or {}
    try:
        if name == RUN_BATCH:
            queue, task, entries = _body_args(message)[:3]
            _unbatch_unknown(queue, task, entries, hostname)
            return
        dispatch = dispatch_from_headers(headers)
        if dispatch is not None:
            _fail_unknown(dispatch, str(name), hostname)
    except Exception:  # never take the Celery worker's consumer down
        logger.exception("delayqueue: could not settle the discarded message of %r", name)


def _body_args(message: Any) -> list[Any]:
    body = message.decode()  # (JSON: kombu's decoder; nothing is unpickled)
    args = body[0] if isinstance(body, list | tuple) else body.get("args")
    return list(args) if isinstance(args, list | tuple) else []


def _fail_unknown(dispatch: tuple[str, str, str], task: str, hostname: str) -> None:
    queue, job_id, token = dispatch
    if not valid_dispatch(queue, job_id, token):
        return
    error = LookupError(
        f"the Celery worker {hostname} has no task named {task!r}: import its module in the "
        "Celery app (include=[...] or autodiscover_tasks()), or give the task an explicit "
        "name= that is the same in every process"
    )
    fail = failure_call(queue_keys(queue), job_id, token, 1, error, None, task=task, runtime=0.0)
    outcome = run(fail.call, strict=False)
    fail.report(outcome)  # (job_failed, and job_dead when it was its last attempt)
    logger.error("job %s on %s: %s (%s)", job_id, queue, error, outcome)


def _unbatch_unknown(queue: Any, task: Any, entries: Any, hostname: str) -> None:
    """A batch this worker cannot run: the task's jobs stop being batched, and the batch's
    jobs go back to scheduled now, to be sent one to a message."""
    if not (isinstance(queue, str) and isinstance(task, str) and isinstance(entries, list)):
        return
    jobs = [job for job in map(batches.BatchJob.parse, entries) if job is not None]
    jobs = [job for job in jobs if valid_dispatch(queue, job.id, job.token)]
    reason = utf8_safe(
        f"the Celery worker {hostname} discarded a batch of {len(jobs)} jobs "
        f"(it does not know task {task!r} or delayqueue.run_batch)"
    )
    try:
        if presence.fall_back(task, "single", reason, hostname):
            logger.error("delayqueue: %s; its jobs are sent one to a message from now on", reason)
        keys = queue_keys(queue)
        releases = [
            reported.release(
                SENDER_CELERY_WORKER, keys, job.id, token=job.token, delay_ms=0, reason=reason
            )
            for job in jobs
        ]
        run_all(releases, strict=False)
    except DelayQueueError as exc:
        logger.error("delayqueue: %s; could not send its jobs back (%s)", reason, exc)
