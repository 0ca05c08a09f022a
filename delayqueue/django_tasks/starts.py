"""A Django task's start, recorded in the round trip of its job's ``begin``
(``delayqueue.run_django_task``'s rides: delayqueue/runner/riders.py): the results hash says
RUNNING, with this attempt's worker and times, and what earlier attempts recorded is read
back, in the pipeline that begins the job (lua/task_started.lua, given the dispatch's token:
nothing is written for a dispatch its begin does not let run).

The start written there is provisional: the begin comes before the hold of a job handed
over ahead of its due time, and a batch begins all its jobs at once. It is the job's due
time, or the begin's time when that is later; the attempt writes its real start with its
outcome (attempts.py). Framework-free, as run.py: the runner asks for the call before the
task's code is imported."""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Mapping, Sequence
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

from delayqueue.django_tasks.job_args import (
    BACKEND,
    BACKOFF,
    DEFAULT_BACKEND,
    DEFAULT_PRIORITY,
    DEFAULT_RESULT_TTL,
    MAX_KEPT,
    PRIORITY,
    RESULT_TTL,
    stored_priority,
)
from delayqueue.engine import task_results
from delayqueue.engine.keys import QueueKeys
from delayqueue.engine.transitions import ScriptCall

RUNNING = "RUNNING"  # TaskResultStatus.RUNNING's value
_ENCODER = json.JSONEncoder()  # json.dumps's
_encode = _ENCODER.encode
# The arguments a job carries came as JSON, so they hold no cycle: json.dumps's JSON, from
# its C encoder run without cycle markers and without the encode() that makes it anew each
# call (as wire.py's arguments; None where there is no C encoder).
_C_ENCODE = (
    c_make_encoder(
        None, _ENCODER.default, encode_basestring_ascii, None, ": ", ", ", False, False, True
    )
    if c_make_encoder is not None
    else None
)
_KEYWORDS = frozenset((BACKEND, PRIORITY, RESULT_TTL, BACKOFF))


def started_call(
    keys: QueueKeys,
    job_id: str,
    *,
    now_ms: int,
    request: Any,
    path: str,
    args: Any,
    kwargs: Any,
    backend: str,
    priority: int,
    result_ttl: int,
    token: str = "",
) -> ScriptCall[task_results.TaskStarted | None]:
    """The call that records the start of an attempt of job ``job_id`` (``token``: only
    when that dispatch has begun), on the Celery worker's node name (``celery@host``), else
    this host and process."""
    hostname = getattr(request, "hostname", None)
    return task_results.task_started(
        keys,
        job_id,
        now_ms=now_ms,
        worker=str(hostname) if hostname else f"{socket.gethostname()}:{os.getpid()}",
        ttl_seconds=result_ttl,
        kept=MAX_KEPT,
        task=path,
        args=_encode(args) if _C_ENCODE is None else "".join(_C_ENCODE(args, 0)),
        kwargs=_encode(kwargs) if kwargs else "{}",  # (the usual call's, made once)
        backend=backend,
        priority=str(priority),
        status=RUNNING,
        token=token,
    )


class StartWithBegin:
    """``run_django_task``'s rides: its start in its begin's round trip."""

    def at_begin(
        self,
        keys: QueueKeys,
        job_id: str,
        token: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        request: Any,
        due_ms: int | None,
    ) -> ScriptCall[task_results.TaskStarted | None] | None:
        """None for arguments that are not a Django task's (the run then fails as
        Celery calls it, or records its start itself)."""
        if len(args) != 3:
            return None
        path, call_args, call_kwargs = args
        priority: int | None
        if not kwargs:  # (a job of the default backend, priority and result TTL)
            backend, priority, result_ttl = DEFAULT_BACKEND, DEFAULT_PRIORITY, DEFAULT_RESULT_TTL
        elif _KEYWORDS.issuperset(kwargs):
            backend = kwargs.get(BACKEND, DEFAULT_BACKEND)
            priority = kwargs.get(PRIORITY, DEFAULT_PRIORITY)
            if type(priority) is not int:  # (True, as an earlier build wrote it)
                priority = stored_priority(priority)
            result_ttl = kwargs.get(RESULT_TTL, DEFAULT_RESULT_TTL)
            if not isinstance(backend, str):
                return None
        else:
            return None
        if not isinstance(path, str):
            return None
        now_ms = round(time.time() * 1000)
        if due_ms is not None and due_ms > now_ms:
            now_ms = due_ms  # held until then
        return started_call(
            keys, job_id, now_ms=now_ms, request=request, path=path, args=call_args,
            kwargs=call_kwargs, backend=backend, priority=priority or 0,
            result_ttl=result_ttl, token=token,
        )  # fmt: skip


START_WITH_BEGIN = StartWithBegin()
