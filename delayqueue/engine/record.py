"""Reads of one job's record: its hash ``QueueKeys.job(id)`` and, for a job never claimed,
its packed spec (``packing.py``); the fields by their names in ``keys.JobField``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from delayqueue.engine.async_clients import loop_clients
from delayqueue.engine.clients import get_raw_redis, get_redis
from delayqueue.engine.decode import integer, text, text_fields
from delayqueue.engine.keys import STATES, JobField, QueueKeys, State, queue_keys
from delayqueue.engine.packing import job_fields, task_code
from delayqueue.engine.reads import Reads
from delayqueue.engine.redis_errors import redis_errors

# ---- one job, everything stored about it -----------------------------------------------


@dataclass(frozen=True)
class StoredJob:
    """One job as stored, read once: what it is (from its hash, under its packed spec's
    parts when it has one) and what happened to it. A field that is absent is None; a number
    that is not one is None; text that is not UTF-8 has its bytes escaped (``decode.text``)."""

    task: str | None = None
    args: str | None = None  # JSON list, as stored
    kwargs: str | None = None  # JSON object, as stored
    key: str | None = None  # the dedupe key
    trace: str | None = None  # W3C trace context of its scheduling (docs/tracing.md)
    max_attempts: int | None = None
    visibility_ms: int | None = None
    attempts: int | None = None  # attempts begun
    token: str | None = None  # the fencing token of its current dispatch
    error: str | None = None  # the last failure's exception
    traceback: str | None = None
    reason: str | None = None  # why it died
    history: str | None = None  # JSON list of its attempts, as stored
    # a packed spec that could not be unpacked, as it is (its ``problem``)
    raw: str | None = None
    found: bool = False  # any of its data is there

    @property
    def problem(self) -> str | None:
        if self.raw is None:
            return None
        if task_code(self.raw) is not None:
            return "its packed spec names its task by a code its queue's tasks hash lacks"
        return "its packed spec cannot be unpacked"

    @property
    def args_or_raw(self) -> str | None:
        """Its arguments as stored, or the spec it could not be unpacked from."""
        return self.args if self.args is not None else self.raw


def job_record(fields: dict[str, str]) -> StoredJob:
    """The record of a job's fields (``packing.job_fields``)."""
    get = fields.get
    return StoredJob(
        task=get(JobField.TASK),
        args=get(JobField.ARGS),
        kwargs=get(JobField.KWARGS),
        key=get(JobField.KEY),
        trace=get(JobField.TRACE),
        max_attempts=integer(get(JobField.MAX_ATTEMPTS)),
        visibility_ms=integer(get(JobField.VISIBILITY_MS)),
        attempts=integer(get(JobField.ATTEMPTS)),
        token=get(JobField.TOKEN),
        error=get(JobField.ERROR),
        traceback=get(JobField.TRACEBACK),
        reason=get(JobField.REASON),
        history=get(JobField.HISTORY),
        raw=get(JobField.RAW),
        found=bool(fields),
    )


@dataclass(frozen=True)
class JobOnRecord:
    """Everything Redis holds about one job: its record and its score in each state's
    sorted set (None where it is not)."""

    job: StoredJob
    scores: dict[State, float | None]

    @property
    def state(self) -> State | None:
        return next((s for s, score in self.scores.items() if score is not None), None)


def stored_job(keys: QueueKeys, job_id: str, notes: list[str]) -> JobOnRecord:
    """One job's record and states, in one round trip (keys of the wrong type read as
    empty, with a note)."""
    member = job_id.encode()
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        reads.add("hgetall", keys.job_of_member(member), default={})
        reads.add("hget", keys.spec_bucket(member), job_id, default=None)
        for state in STATES:
            reads.add("zscore", keys.of_state(state), job_id, default=None)
        stored, spec, *scores = reads.run()
    spec = None if spec is None else text(spec)
    fields = job_fields(text_fields(stored), spec, task_options(keys, [spec], notes))
    return JobOnRecord(job_record(fields), dict(zip(STATES, scores, strict=True)))


@dataclass(frozen=True)
class Place:
    """A queue that holds a job: its state there (None: its data is there, in no state)."""

    queue: str
    state: State | None


def places_of(job_id: str, queues: list[str], notes: list[str]) -> list[Place]:
    """The queues of ``queues`` that hold ``job_id`` and in which state: one round trip of
    ZSCOREs, the packed spec and the job hash per queue."""
    member = job_id.encode()
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        for queue in queues:
            keys = queue_keys(queue)
            for each in STATES:
                reads.add("zscore", keys.of_state(each), job_id, default=None)
            reads.add("hexists", keys.spec_bucket(member), job_id, default=0)
            reads.add("exists", keys.job_of_member(member), default=0)
        replies = reads.run()
    width = len(STATES) + 2
    places = []
    for index, queue in enumerate(queues):
        *scores, spec, stored = replies[index * width : (index + 1) * width]
        state: State | None = next(
            (s for s, sc in zip(STATES, scores, strict=True) if sc is not None), None
        )
        if state is not None or spec or stored:
            places.append(Place(queue, state))
    return places


# ---- fields of many jobs ----------------------------------------------------------------


# What a list row needs, and what names a job to a person.
_ROW_FIELDS = (
    JobField.TASK,
    JobField.ARGS,
    JobField.KWARGS,
    JobField.KEY,
    JobField.ATTEMPTS,
    JobField.MAX_ATTEMPTS,
    JobField.ERROR,
    JobField.REASON,
)
_LABEL_FIELDS = (JobField.TASK, JobField.KEY, JobField.REASON)  # (a search looks at them)


def jobs_of(
    keys: QueueKeys, members: list[bytes], notes: list[str], *, labels_only: bool = False
) -> list[StoredJob]:
    """The records of many jobs, as a list row shows them (only their task, dedupe key and
    why they died with ``labels_only``: what a search looks at), from each one's hash or
    packed spec, in one round trip (a job key or specs bucket of the wrong type reads as
    empty, with a note)."""
    if not members:
        return []
    names = _LABEL_FIELDS if labels_only else _ROW_FIELDS
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        for member in members:
            reads.add("hmget", keys.job_of_member(member), names, default=[None] * len(names))
            reads.add("hget", keys.spec_bucket(member), member, default=None)
        replies = reads.run()
    specs = [None if spec is None else text(spec) for spec in replies[1::2]]
    paths = task_options(keys, specs, notes)
    found = []
    for values, spec in zip(replies[::2], specs, strict=True):
        stored = {n: text(v) for n, v in zip(names, values, strict=True) if v}
        fields = job_fields(stored, spec, paths)
        found.append(job_record({name: fields[name] for name in names if name in fields}))
    return found


def task_options(keys: QueueKeys, specs: list[str | None], notes: list[str]) -> dict[str, str]:
    """The task options of the codes ``specs`` are coded with (packing.task_code), from the
    queue's tasks hash: one more round trip when there is any (a code the hash lacks, or a
    hash of the wrong type, with a note, leaves that spec unreadable, not the page)."""
    codes = sorted({code for spec in specs if spec and (code := task_code(spec)) is not None})
    if not codes:
        return {}
    with redis_errors():
        reads = Reads(get_raw_redis(), notes)
        reads.add("hmget", keys.tasks, codes, default=[None] * len(codes))
        (paths,) = reads.run()
    return {code: text(path) for code, path in zip(codes, paths, strict=True) if path}


# ---- the task name of a job, wherever its record is -------------------------------------


def _task_name_commands(keys: QueueKeys, job_id: str) -> list[tuple[Any, ...]]:
    return [
        ("HGET", keys.job(job_id), JobField.TASK),
        ("HGET", keys.spec_bucket(job_id), job_id),
    ]


def _task_name_from(replies: list[Any]) -> tuple[str, str | None]:
    """The task's name, or "" and the code its packed spec is coded with (to read from the
    queue's tasks hash)."""
    # A key of the wrong type (corrupt data) only leaves the name unknown ("").
    in_hash, spec = (None if isinstance(reply, Exception) else reply for reply in replies)
    if not in_hash and spec and (code := task_code(spec)) is not None:
        return "", code if len(code) > 1 else None  # ("\x01" alone: no code)
    fields = job_fields({JobField.TASK: in_hash} if in_hash else {}, spec)
    return fields.get(JobField.TASK, ""), None


def _path_of(reply: Any) -> str:
    """The task of task options as read from the tasks hash ("" for anything else)."""
    return text(reply).partition("\n")[0] if isinstance(reply, str | bytes) else ""


def read_task_name(keys: QueueKeys, job_id: str) -> str:
    """The task of job ``job_id``, from its hash or its packed spec, in one round trip (two
    when its spec names the task by a code)."""
    with redis_errors():
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        for command in _task_name_commands(keys, job_id):
            pipe.execute_command(*command)
        name, code = _task_name_from(pipe.execute(raise_on_error=False))
        if code is None:
            return name
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("HGET", keys.tasks, code)
        return _path_of(pipe.execute(raise_on_error=False)[0])


async def aread_task_name(keys: QueueKeys, job_id: str) -> str:
    """``read_task_name`` on the running loop's client."""
    clients = await loop_clients()
    with redis_errors():
        pipe = clients.client.pipeline(transaction=False)
        for command in _task_name_commands(keys, job_id):
            pipe.execute_command(*command)
        name, code = _task_name_from(list(await pipe.execute(raise_on_error=False)))
        if code is None:
            return name
        pipe = clients.client.pipeline(transaction=False)
        pipe.execute_command("HGET", keys.tasks, code)
        return _path_of((await pipe.execute(raise_on_error=False))[0])


# ---- failures as the record keeps them --------------------------------------------------


def describe_exception(exc: BaseException, limit: int) -> str:
    """``"ExcType: message"`` cut to ``limit`` characters; a note in place of the message
    when ``str(exc)`` itself raises."""
    try:
        text = str(exc)
    except Exception as inner:
        text = f"<str() of the exception raised {type(inner).__qualname__}>"
    return f"{type(exc).__qualname__}: {text}"[:limit]


def utf8_safe(text: str) -> str:
    """``text`` with anything UTF-8 cannot hold (lone surrogates) escaped as ``\\udXXX``:
    Redis stores UTF-8, and a failure record must not be lost to one bad character."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text
