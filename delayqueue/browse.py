"""Read-only queries on Redis for the admin pages: paged job lists and one job (the
dashboard's queries are in dashboard.py).

Nothing here loads a whole queue: counts are ZCARD/ZCOUNT, lists are ZRANGE by rank with the
page's job hashes fetched in one pipeline, and text search scans a bounded window of at most
``SEARCH_WINDOW`` entries (the page says so). "Now" is Redis's clock (TIME), the clock every
script scores with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from django.utils import timezone
from redis import Redis
from ulid import ULID

from delayqueue.connection import get_redis, global_keys, queue_keys, redis_errors, redis_now_ms
from delayqueue.keys import JOB_ID, QUEUE_NAME, QueueKeys
from delayqueue.packing import job_fields

State = Literal["scheduled", "inflight", "dead"]
Order = Literal["asc", "desc"]
STATES: tuple[State, ...] = ("scheduled", "inflight", "dead")

PAGE_SIZE = 50
SEARCH_WINDOW = 5000  # most entries a text search or task filter looks at
SCAN_CHUNK = 500
PREVIEW_CHARS = 80
MINUTE_MS = 60_000
HOUR_MS = 3_600_000

# Fields of a job hash a list row needs (see keys.py for all fields).
_ROW_FIELDS = ("task", "args", "kwargs", "key", "att", "max", "err", "why")


def zset_of(keys: QueueKeys, state: State) -> str:
    return {"scheduled": keys.scheduled, "inflight": keys.inflight, "dead": keys.dead}[state]


# ---- time as people read it ------------------------------------------------------------


@dataclass(frozen=True)
class Moment:
    """A Redis time (epoch ms) seen from Redis's "now": local time and "in 3 min" text."""

    ms: int
    now_ms: int

    @property
    def local(self) -> datetime:
        return timezone.localtime(datetime.fromtimestamp(self.ms / 1000, tz=UTC))

    @property
    def relative(self) -> str:
        return relative_text(self.ms - self.now_ms)

    @property
    def past(self) -> bool:
        return self.ms <= self.now_ms


def relative_text(delta_ms: int) -> str:
    """``in 3 min`` / ``3 min ago`` / ``now``, for a signed distance from now."""
    seconds = abs(delta_ms) / 1000
    if seconds < 1:
        return "now"
    if seconds < 60:
        span = f"{int(seconds)} s"
    elif seconds < 3600:
        span = f"{int(seconds // 60)} min"
    elif seconds < 86400:
        hours, minutes = divmod(int(seconds // 60), 60)
        span = f"{hours} h {minutes} min" if minutes else f"{hours} h"
    else:
        days = int(seconds // 86400)
        span = f"{days} day{'s' if days != 1 else ''}"
    return f"in {span}" if delta_ms > 0 else f"{span} ago"


# ---- queues -----------------------------------------------------------------------------


def known_queues() -> list[str]:
    """Queue names from ``dq:queues`` that are valid names, sorted."""
    with redis_errors():
        names = get_redis().smembers(global_keys().queues)
    return sorted(str(n) for n in names if QUEUE_NAME.fullmatch(str(n)))


def queue_exists(queue: str) -> bool:
    """A valid name that is known, or that holds jobs in any state."""
    if not QUEUE_NAME.fullmatch(queue):
        return False
    keys = queue_keys(queue)
    with redis_errors():
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        pipe.sismember(global_keys().queues, queue)
        pipe.exists(keys.scheduled, keys.inflight, keys.dead)
        known, holding = pipe.execute()
    return bool(known) or int(holding) > 0


def count(queue: str, state: State) -> int:
    with redis_errors():
        return int(get_redis().zcard(zset_of(queue_keys(queue), state)))


# ---- job lists --------------------------------------------------------------------------


@dataclass
class JobRow:
    id: str
    at: Moment  # due time, in-flight deadline or time of death, by the list's state
    task: str
    args_preview: str
    key: str
    attempts: int
    max_attempts: int | None
    error: str
    missing: bool  # the id is in the zset but its hash is gone


@dataclass
class JobPage:
    queue: str
    state: State
    order: Order
    page: int
    rows: list[JobRow]
    total: int  # jobs in this state (ZCARD)
    matched: int  # rows that match the search/filter (== total without one)
    pages: int
    search: str = ""
    task: str = ""
    search_mode: Literal["", "id", "key", "scan"] = ""
    scanned: int = 0  # entries a bounded scan looked at
    bounded: bool = False  # the scan stopped at SEARCH_WINDOW before the end of the list
    elsewhere: State | None = None  # the job searched for by id or key is in another state
    elsewhere_id: str = ""
    tasks_seen: list[str] = field(default_factory=list)
    now_ms: int = 0

    @property
    def has_previous(self) -> bool:
        return self.page > 1

    @property
    def has_next(self) -> bool:
        return self.page < self.pages

    @property
    def first_rank(self) -> int:
        return (self.page - 1) * PAGE_SIZE + 1 if self.rows else 0

    @property
    def last_rank(self) -> int:
        return (self.page - 1) * PAGE_SIZE + len(self.rows)


class PageOutOfRange(LookupError):
    """A page number past the last page."""


def _preview(args_json: str | None, kwargs_json: str | None) -> str:
    text = args_json or ""
    if kwargs_json:
        text = f"{text} {kwargs_json}"
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _int_or(value: Any, default: int | None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _fields(
    client: Redis, keys: QueueKeys, entries: list[tuple[str, float]], names: tuple[str, ...]
) -> list[list[str | None]]:
    """The named fields of each job, from its hash or its packed spec, in one round trip."""
    pipe = client.pipeline(transaction=False)
    for job_id, _ in entries:
        pipe.hmget(keys.job(job_id), names)
        pipe.hget(keys.specs, job_id)
    replies = pipe.execute()
    found = []
    for values, spec in zip(replies[::2], replies[1::2], strict=True):
        fields = job_fields({n: v for n, v in zip(names, values, strict=True) if v}, spec)
        found.append([fields.get(name) for name in names])
    return found


def _rows(
    client: Redis, keys: QueueKeys, entries: list[tuple[str, float]], now: int
) -> list[JobRow]:
    rows = []
    for (job_id, score), values in zip(
        entries, _fields(client, keys, entries, _ROW_FIELDS), strict=True
    ):
        task, args, kwargs, key, att, max_, err, why = values
        rows.append(
            JobRow(
                id=job_id,
                at=Moment(int(score), now),
                task=task or "",
                args_preview=_preview(args, kwargs),
                key=key or "",
                attempts=_int_or(att, 0) or 0,
                max_attempts=_int_or(max_, None),
                error=why or err or "",
                missing=task is None,
            )
        )
    return rows


def _range(
    client: Redis, zset: str, start: int, stop: int, order: Order
) -> list[tuple[str, float]]:
    if order == "desc":
        return client.zrevrange(zset, start, stop, withscores=True)  # type: ignore[return-value]
    return client.zrange(zset, start, stop, withscores=True)  # type: ignore[return-value]


def _pages(count: int) -> int:
    return max(1, -(-count // PAGE_SIZE))


def _check_page(page: int, pages: int) -> None:
    if page < 1 or page > pages:
        raise PageOutOfRange(f"page {page} does not exist; there are {pages}")


def job_page(
    queue: str,
    state: State,
    *,
    page: int = 1,
    order: Order = "asc",
    search: str = "",
    task: str = "",
) -> JobPage:
    """One page of a queue's jobs in one state, newest or oldest first, optionally searched
    (exact job id, exact dedupe key, else a bounded scan over task name and key) and filtered
    by exact task name. Raises PageOutOfRange for a page past the end."""
    keys = queue_keys(queue)
    zset = zset_of(keys, state)
    search, task = search.strip(), task.strip()
    with redis_errors():
        client = get_redis()
        now = redis_now_ms(client)
        total = int(client.zcard(zset))
        result = JobPage(queue, state, order, page, [], total, total, 1, search, task, now_ms=now)
        if search and not task:
            if _find_exact(client, keys, state, result):
                _check_page(page, result.pages)
                return result
        if search or task:
            _scan(client, keys, zset, result)
            return result
        result.pages = _pages(total)
        _check_page(page, result.pages)
        start = (page - 1) * PAGE_SIZE
        entries = _range(client, zset, start, start + PAGE_SIZE - 1, order)
        result.rows = _rows(client, keys, entries, now)
        result.tasks_seen = sorted({row.task for row in result.rows if row.task})
    return result


def _find_exact(client: Redis, keys: QueueKeys, state: State, result: JobPage) -> bool:
    """Search by exact job id or exact dedupe key; True when the search was one of those."""
    candidate = result.search.upper()
    mode: Literal["id", "key"]
    if JOB_ID.fullmatch(candidate):
        job_id, mode = candidate, "id"
    else:
        found = client.hget(keys.dedupe, result.search)
        if found is None:
            return False
        job_id, mode = str(found), "key"
    pipe = client.pipeline(transaction=False)
    for s in STATES:
        pipe.zscore(zset_of(keys, s), job_id)
    scores = dict(zip(STATES, pipe.execute(), strict=True))
    result.search_mode = mode
    result.matched = 0
    score = scores[state]
    if score is not None:
        result.rows = _rows(client, keys, [(job_id, score)], result.now_ms)
        result.matched = 1
    else:
        result.elsewhere = next((s for s in STATES if scores[s] is not None), None)
        result.elsewhere_id = job_id
    return True


def _scan(client: Redis, keys: QueueKeys, zset: str, result: JobPage) -> None:
    """Filter a bounded window (SEARCH_WINDOW entries from the head in the page's order) by a
    text search over task name and dedupe key and/or an exact task name."""
    needle = result.search.lower()
    matches: list[tuple[str, float]] = []
    seen_tasks: set[str] = set()
    scanned = 0
    while scanned < SEARCH_WINDOW:
        want = min(SCAN_CHUNK, SEARCH_WINDOW - scanned)
        entries = _range(client, zset, scanned, scanned + want - 1, result.order)
        found = _fields(client, keys, entries, ("task", "key"))
        for entry, (task, key) in zip(entries, found, strict=True):
            task, key = task or "", key or ""
            if task:
                seen_tasks.add(task)
            if result.task and task != result.task:
                continue
            if needle and not (needle in task.lower() or needle in key.lower()):
                continue
            matches.append(entry)
        scanned += len(entries)
        if len(entries) < want:
            break
    result.search_mode = "scan"
    result.scanned = scanned
    result.bounded = scanned >= SEARCH_WINDOW and result.total > SEARCH_WINDOW
    result.matched = len(matches)
    result.pages = _pages(len(matches))
    result.tasks_seen = sorted(seen_tasks)
    _check_page(result.page, result.pages)
    start = (result.page - 1) * PAGE_SIZE
    result.rows = _rows(client, keys, matches[start : start + PAGE_SIZE], result.now_ms)


# ---- one job ----------------------------------------------------------------------------


@dataclass
class Attempt:
    at: Moment | None
    attempt: int | None
    outcome: str
    detail: str


@dataclass
class JobDetail:
    queue: str
    id: str
    state: State | None  # None: the hash exists but the job is in no set (a moment's race)
    at: Moment | None
    now_ms: int
    task: str
    args: str  # pretty-printed JSON, or the raw text when it is not JSON
    kwargs: str
    args_valid: bool
    key: str
    attempts: int
    max_attempts: int | None
    visibility_ms: int | None
    created: datetime | None
    token: str
    error: str
    traceback: str
    reason: str
    history: list[Attempt]
    history_valid: bool
    missing: bool  # the id is in a set but its hash is gone


def _pretty(raw: str | None, empty: str) -> tuple[str, bool]:
    if raw is None or raw == "":
        return empty, True
    try:
        return json.dumps(json.loads(raw), indent=2, ensure_ascii=False, sort_keys=True), True
    except ValueError:
        return raw, False


def _history(raw: str | None, now: int) -> tuple[list[Attempt], bool]:
    if not raw:
        return [], True
    try:
        entries = json.loads(raw)
    except ValueError:
        return [], False
    if not isinstance(entries, list):
        return [], False
    history = []
    for entry in entries:
        if not isinstance(entry, dict):
            continue
        at = _int_or(entry.get("at"), None)
        history.append(
            Attempt(
                at=Moment(at, now) if at is not None else None,
                attempt=_int_or(entry.get("attempt"), None),
                outcome=str(entry.get("outcome", "")),
                detail=str(entry.get("detail", "")),
            )
        )
    return history, True


def job_detail(queue: str, job_id: str) -> JobDetail | None:
    """Everything about one job, or None when neither its hash nor any set holds it."""
    keys = queue_keys(queue)
    with redis_errors():
        client = get_redis()
        pipe = client.pipeline(transaction=False)
        pipe.time()
        pipe.hgetall(keys.job(job_id))
        pipe.hget(keys.specs, job_id)
        for s in STATES:
            pipe.zscore(zset_of(keys, s), job_id)
        (seconds, micros), hash_fields, spec, *scores = pipe.execute()
    fields = job_fields(hash_fields, spec)
    now = int(seconds) * 1000 + int(micros) // 1000
    state = next((s for s, score in zip(STATES, scores, strict=True) if score is not None), None)
    if not fields and state is None:
        return None
    score = scores[STATES.index(state)] if state else None
    args, args_ok = _pretty(fields.get("args", fields.get("raw")), "[]")
    kwargs, kwargs_ok = _pretty(fields.get("kwargs"), "{}")
    history, history_ok = _history(fields.get("hist"), now)
    try:
        created: datetime | None = timezone.localtime(ULID.from_str(job_id).datetime)
    except ValueError:
        created = None
    return JobDetail(
        queue=queue,
        id=job_id,
        state=state,
        at=Moment(int(score), now) if score is not None else None,
        now_ms=now,
        task=fields.get("task", ""),
        args=args,
        kwargs=kwargs,
        args_valid=args_ok and kwargs_ok,
        key=fields.get("key", ""),
        attempts=_int_or(fields.get("att"), 0) or 0,
        max_attempts=_int_or(fields.get("max"), None),
        visibility_ms=_int_or(fields.get("vt"), None),
        created=created,
        token=fields.get("tok", ""),
        error=fields.get("err", ""),
        traceback=fields.get("tb", ""),
        reason=fields.get("why", ""),
        history=history,
        history_valid=history_ok,
        missing=not fields,
    )
