"""Every Redis key delayqueue uses, named in this one place.

All keys of queue ``Q`` carry the hash tag ``{Q}``, so one queue lives in one Redis Cluster
slot and every Lua script touches one slot. Scripts that must reach jobs they learn about
inside Lua (claim, reap, dedupe lookups) get ``job_prefix`` through KEYS and append the id;
those that read or write packed specs get ``spec_prefix`` and append the id's last two
characters (``spec_bucket``).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Final, Literal

from delayqueue.conf import get_settings
from delayqueue.errors import InvalidJobId, InvalidQueueName

# The counters of a queue's per-minute stats hash (``QueueKeys.stats``; lua/_stats.lua).
STAT_FIELDS = ("dispatched", "acked", "failed", "dead")
# Per-minute stats hashes outlive the two hours the dashboard charts by five minutes.
STATS_TTL_SECONDS = 2 * 3600 + 300

# A queue's name, or one of its shards' (engine/shards.py): "orders~3".
QUEUE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}(?:~[0-9]{1,4})?")
JOB_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}")  # a ULID: Crockford base32, time first

# The states a job is in, each a sorted set of the queue (``QueueKeys.of_state``).
State = Literal["scheduled", "inflight", "dead"]
STATES: tuple[State, ...] = ("scheduled", "inflight", "dead")


_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_PAIRS = [high + low for high in _CROCKFORD for low in _CROCKFORD]  # 10 bits -> 2 characters


_time_part: tuple[int, str] = (-1, "")  # the last ms an id was made in, as its 10 characters


def new_job_id() -> str:
    """A new ULID as its 26-character string: 48 bits of epoch ms (10 characters, written
    once per ms), then 80 random bits (16 characters, two per 10 bits): a seventh of the
    cost of python-ulid's ``str(ULID())``."""
    global _time_part
    ms = time.time_ns() // 1_000_000
    at, head = _time_part  # (one tuple: threads see both parts of the same ms)
    if at != ms:
        head = "".join([_PAIRS[(ms >> shift) & 1023] for shift in (40, 30, 20, 10, 0)])
        _time_part = (ms, head)
    r, pairs = int.from_bytes(os.urandom(10), "big"), _PAIRS
    return (
        f"{head}{pairs[r >> 70]}{pairs[(r >> 60) & 1023]}{pairs[(r >> 50) & 1023]}"
        f"{pairs[(r >> 40) & 1023]}{pairs[(r >> 30) & 1023]}{pairs[(r >> 20) & 1023]}"
        f"{pairs[(r >> 10) & 1023]}{pairs[r & 1023]}"
    )


# A random byte -> a Crockford base32 character: its low five bits (256 = 8 x 32, so each
# character is uniform), for new_job_ids.
_BYTE_TO_CROCKFORD = bytes.maketrans(bytes(range(256)), (_CROCKFORD * 8).encode())


def new_job_ids(count: int) -> list[str]:
    """``count`` new ULIDs as ``new_job_id`` makes them (this ms, then 80 random bits as 16
    Crockford base32 characters), in one go for a batch of jobs: one read of the OS's random
    source, a byte per character turned into its character in one ``translate``; a fifth of
    the cost of ``new_job_id`` per id."""
    if count <= 0:
        return []
    head = new_job_id()[:10]  # (this ms, as new_job_id writes it)
    text = os.urandom(16 * count).translate(_BYTE_TO_CROCKFORD).decode("ascii")
    return [head + text[start : start + 16] for start in range(0, 16 * count, 16)]


def current_minute() -> int:
    """The epoch minute whose stats hash counts what happens now."""
    return int(time.time() // 60)


def check_queue_name(name: object) -> str:
    if not isinstance(name, str) or not QUEUE_NAME.fullmatch(name):
        raise InvalidQueueName(
            f"queue name {name!r} is not 1-64 characters of letters, digits, '_', '.' or '-' "
            "(or a shard of one: 'orders~3')"
        )
    return name


def check_job_id(job_id: object) -> str:
    if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
        raise InvalidJobId(f"{job_id!r} is not a delayqueue job id (a 26-character ULID)")
    return job_id


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue. Each name is built once per instance (``queue_keys`` keeps
    the instances of the queues in use): a delay_for builds none."""

    prefix: str
    queue: str

    @cached_property
    def base(self) -> str:
        return f"{self.prefix}:{{{self.queue}}}"

    @cached_property
    def job_prefix(self) -> str:
        """Job hashes are ``job_prefix + id``."""
        return f"{self.base}:job:"

    def job(self, job_id: str) -> str:
        return self.job_prefix + job_id

    def job_of_member(self, member: bytes) -> bytes:
        """The hash of the job a sorted set's member names, whatever bytes the member is."""
        return self.job_prefix.encode() + member

    def of_state(self, state: State) -> str:
        """The sorted set that holds the queue's jobs in ``state``."""
        if state == "scheduled":
            return self.scheduled
        if state == "inflight":
            return self.inflight
        return self.dead

    @cached_property
    def spec_prefix(self) -> str:
        """The packed spec of a scheduled job never claimed yet is one field (id -> spec) of
        the hash ``spec_prefix + the id's last two characters``, its bucket (lua/_spec.lua):
        1,024 buckets for ULIDs, each small enough to stay a compact listpack in Redis."""
        return f"{self.base}:specs:"

    def spec_bucket(self, job_id: str | bytes) -> str | bytes:
        """hash: the bucket of packed specs that holds job ``job_id``'s, named as _spec.lua's
        ``spec_bucket`` names it from any id, even an empty one: ``spec_prefix`` and the id's
        last two bytes (its UTF-8 bytes for a str). Text for an id that ends in two ASCII
        characters, as every job id does; else bytes."""
        if isinstance(job_id, str):
            if job_id[-2:].isascii():
                return self.spec_prefix + job_id[-2:]
            job_id = job_id.encode("utf-8", "surrogateescape")
        return self.spec_prefix.encode() + job_id[-2:]

    @cached_property
    def tasks(self) -> str:
        """hash: a task's options ("<task>\\n<max attempts>\\n<visibility ms>") -> their
        code and code -> options, and the last number given (field "\\x01"): a packed spec
        in a bucket names them by their code (lua/_spec.lua)."""
        return f"{self.base}:tasks"

    @cached_property
    def scheduled(self) -> str:
        """zset: id -> due time (ms)."""
        return f"{self.base}:scheduled"

    @cached_property
    def inflight(self) -> str:
        """zset: id -> visibility deadline (ms)."""
        return f"{self.base}:inflight"

    @cached_property
    def dead(self) -> str:
        """zset: id -> time it died (ms)."""
        return f"{self.base}:dead"

    @cached_property
    def dedupe(self) -> str:
        """hash: dedupe key -> id."""
        return f"{self.base}:keys"

    @cached_property
    def wake(self) -> str:
        """pub/sub channel: published when a new job becomes the earliest."""
        return f"{self.base}:wake"

    @cached_property
    def paused(self) -> str:
        """string: present while the queue is paused."""
        return f"{self.base}:paused"

    def stats(self, minute: int) -> str:
        """hash: counters (dispatched, acked, failed, dead) of one minute (epoch minutes)."""
        return f"{self.base}:stats:{minute}"

    @cached_property
    def schedules(self) -> str:
        """zset: schedule name -> its next occurrence (ms; +inf while paused)."""
        return f"{self.base}:schedules"

    @cached_property
    def schedule_prefix(self) -> str:
        """Schedule hashes are ``schedule_prefix + name`` (fields: ``ScheduleField``)."""
        return f"{self.base}:schedule:"

    def schedule(self, name: str) -> str:
        return self.schedule_prefix + name

    @cached_property
    def limit_prefix(self) -> str:
        """The state of a rate or concurrency limit is ``limit_prefix + limit_name(...)``
        and a suffix (lua/_limits.lua; engine/limits.py): in the queue's slot."""
        return f"{self.base}:limit:"

    def task_result(self, job_id: str) -> str:
        """hash: the Django Tasks result of job ``job_id`` (fields: ``TaskResultField``),
        written by the job's run on the Celery side and kept RESULT_TTL seconds after its
        last write (engine/task_results.py)."""
        return f"{self.base}:result:{job_id}"


@dataclass(frozen=True)
class GlobalKeys:
    """Keys that belong to no single queue."""

    prefix: str

    @property
    def queues(self) -> str:
        """set: known queue names."""
        return f"{self.prefix}:queues"

    @property
    def workers(self) -> str:
        """zset: worker id -> last heartbeat (ms)."""
        return f"{self.prefix}:workers"

    def worker(self, worker_id: str) -> str:
        """hash: host, pid, queues, started of one worker; expires without heartbeats."""
        return f"{self.prefix}:worker:{worker_id}"

    @property
    def celery_sides(self) -> str:
        """hash: Celery worker hostname -> JSON of what its delayqueue side runs (the wire
        protocol, when it last said so): engine/presence.py."""
        return f"{self.prefix}:celery"

    @property
    def fallbacks(self) -> str:
        """hash: task name -> JSON of the simpler form its jobs are handed to Celery in, and
        why (a message of the usual form was discarded): engine/presence.py."""
        return f"{self.prefix}:fallbacks"


class JobField:
    """The fields of a job's hash (``QueueKeys.job``), by what they hold. The Lua scripts
    write them under these names; Python code reads them by these names only."""

    # what the job is (also the packed spec's parts, in ``packing.SPEC_FIELDS``)
    TASK: Final = "task"  # the Celery task's registered name
    ARGS: Final = "args"  # JSON list
    KWARGS: Final = "kwargs"  # JSON object, absent when empty
    MAX_ATTEMPTS: Final = "max"  # absent: the worker's default
    VISIBILITY_MS: Final = "vt"  # absent: the worker's default
    KEY: Final = "key"  # the dedupe key, absent when none
    TRACE: Final = "tc"  # W3C trace context of its scheduling, absent when none (tracing.md)
    # what happened to it
    ATTEMPTS: Final = "att"  # attempts begun
    TOKEN: Final = "tok"  # the fencing token of its current dispatch
    BEGAN: Final = "began"  # the dispatch that began (reap.lua)
    NOT_STARTED: Final = "rp"  # dispatches in a row that never began (claim.lua, reap.lua)
    ERROR: Final = "err"  # the last failure's exception
    TRACEBACK: Final = "tb"  # the last failure's traceback
    REASON: Final = "why"  # why it died
    HISTORY: Final = "hist"  # JSON list of its attempts
    LIMITS: Final = "lim"  # its rate and concurrency limits and limit key (lua/_limits.lua)
    EXPIRES: Final = "exp"  # ms after which it is not started (dead: "expired")
    # not stored: a packed spec that could not be unpacked, shown as it is (packing.py)
    RAW: Final = "raw"


class ScheduleField:
    """The fields of a schedule's hash (``QueueKeys.schedule``; periodic jobs). The Lua
    scripts (plan_schedule, fire, unplan_schedule) write them under these names."""

    NAME: Final = "name"
    TASK: Final = "task"  # the Celery task each occurrence runs
    RULE: Final = "rule"  # as written: "0 6 * * *", "every 60 s"
    CRON: Final = "cron"  # the cron line, absent for an every= rule
    EVERY_MS: Final = "every_ms"  # the period, absent for a cron rule
    TIMEZONE: Final = "tz"
    FINGERPRINT: Final = "fp"  # changes when the rule, its timezone or the spec change
    MISSED: Final = "missed"  # "once" | "all" | "skip"
    SOURCE: Final = "src"  # "code" | "settings"
    SPEC: Final = "spec"  # the packed spec of every occurrence (engine/packing.py)
    LIMITS: Final = "lim"  # their limits and expiry, as enqueue.lua takes them ("" for none)
    NEXT: Final = "next"  # ms of the occurrence whose job is scheduled
    JOB: Final = "job"  # that occurrence's job id
    LAST: Final = "last"  # ms of the last occurrence that was run
    LAST_JOB: Final = "last_job"  # its job id
    FIRED: Final = "fired"  # occurrences run
    MISSED_COUNT: Final = "missed_n"  # occurrences not run (every delay worker was down)
    PAUSED: Final = "paused"  # "1" while paused


class TaskResultField:
    """The fields of a Django Tasks result's hash (``QueueKeys.task_result``), written by
    ``delayqueue.run_django_task`` (delayqueue/django_tasks/run.py). Times are epoch ms;
    what is not a time or a name is JSON."""

    TASK: Final = "task"  # the Django task's module path
    ARGS: Final = "args"  # JSON list
    KWARGS: Final = "kwargs"  # JSON object
    BACKEND: Final = "backend"  # the TASKS alias it was enqueued through
    PRIORITY: Final = "prio"
    STATUS: Final = "status"  # RUNNING, SUCCESSFUL or FAILED: what attempt ATTEMPT did
    ATTEMPT: Final = "att"  # the job's attempt (JobField.ATTEMPTS) that wrote STATUS
    STARTED: Final = "started"  # its first attempt's start
    LAST_ATTEMPT: Final = "last"  # its last attempt's start
    FINISHED: Final = "finished"  # when the attempt of STATUS ended
    WORKERS: Final = "workers"  # JSON list: the Celery worker of each attempt
    ERRORS: Final = "errors"  # JSON list of [exception class path, traceback]
    RETURN: Final = "ret"  # JSON of the return value


class WorkerField:
    """The fields of a delay worker's hash (``GlobalKeys.worker``)."""

    HOST: Final = "host"
    PID: Final = "pid"
    QUEUES: Final = "queues"  # comma-separated
    DISPATCHED: Final = "dispatched"  # jobs handed to Celery since it started
    BEAT: Final = "beat"  # its last heartbeat, ms by Redis's clock


def limit_name(task: str, limit_key: str = "") -> str:
    """The name of one limit's state under ``QueueKeys.limit_prefix`` (as _limits.lua builds
    it): the task name's length first, so no task and key pair names another's."""
    return f"{len(task.encode())}:{task}:{limit_key}"


def queue_keys(queue: str) -> QueueKeys:
    return _queue_keys(get_settings().key_prefix, queue)


@lru_cache(maxsize=4_096)
def _queue_keys(prefix: str, queue: str) -> QueueKeys:
    return QueueKeys(prefix, queue)


def global_keys() -> GlobalKeys:
    return GlobalKeys(get_settings().key_prefix)
