"""Read-only queries on Redis for the admin's job lists (the dashboard's queries are in
dashboard.py, one job's in job_detail.py).

Nothing here loads a whole queue: counts are ZCARD/ZCOUNT, lists are ZRANGE by rank with the
page's job hashes fetched in one pipeline, and text search scans a bounded window of at most
``SEARCH_WINDOW`` entries (the page says so). "Now" is Redis's clock (TIME), the clock every
script scores with. Job data is read as bytes and shown through display.py, so no value
Redis holds can break a page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from delayqueue.engine import queues, record, roster
from delayqueue.engine.keys import (
    JOB_ID,
    QUEUE_NAME,
    STATES,
    State,
    queue_keys,
)
from delayqueue.engine.reads import redis_now
from delayqueue.services.display import Moment, text

Order = Literal["asc", "desc"]

PAGE_SIZE = 50
SEARCH_WINDOW = 5000  # most entries a text search or task filter looks at
SCAN_CHUNK = 500
PREVIEW_CHARS = 80
ID_CHARS = 100  # most characters of a member that is no job id a list shows
ERROR_CHARS = 160  # most characters of a dead job's error summary a list row shows
LABEL_CHARS = 100  # most characters of a task name or dedupe key an action's message shows

Entry = tuple[bytes, float]  # a zset member as stored, and its score


def job_id_of(member: bytes) -> str | None:
    """The member as a job id when it is one (the only members the pages link to)."""
    try:
        candidate = member.decode("ascii")
    except UnicodeDecodeError:
        return None
    return candidate if JOB_ID.fullmatch(candidate) else None


# ---- queues -----------------------------------------------------------------------------


def known_queues(notes: list[str] | None = None) -> list[str]:
    """Queue names from ``dq:queues`` that are valid names, sorted."""
    return roster.queue_names(notes).names


def queue_exists(queue: str) -> bool:
    """A valid name that is known, or that holds jobs in any state."""
    if not QUEUE_NAME.fullmatch(queue):
        return False
    return roster.is_registered(queue) or queues.holds_jobs(queue)


def count(queue: str, state: State) -> int:
    return queues.count(queue, state, [])


@dataclass(frozen=True)
class JobLabel:
    """What names a job to a person besides its id: its task and its dedupe key ("" when
    none, or when the job's data is gone)."""

    task: str
    key: str


def job_labels(queue: str, ids: list[str]) -> dict[str, JobLabel]:
    """The task and dedupe key of each job id, in one round trip, shortened for a message."""
    if not ids:
        return {}
    found = record.jobs_of(queue_keys(queue), [i.encode() for i in ids], [], labels_only=True)
    return {
        job_id: JobLabel(
            error_summary(job.task or "", LABEL_CHARS), error_summary(job.key or "", LABEL_CHARS)
        )
        for job_id, job in zip(ids, found, strict=True)
    }


# ---- job lists --------------------------------------------------------------------------


@dataclass
class JobRow:
    id: str  # the member as text (escaped when it is not UTF-8, cut when huge)
    link_id: str | None  # the job id when the member is one; None: no page, no action
    at: Moment  # due time, in-flight deadline or time of death, by the list's state
    task: str
    args_preview: str
    key: str
    attempts: int
    max_attempts: int | None
    reason: str  # why a dead job is dead ("failed 3 of 3 attempts"), else ""
    error: str  # the last error's summary ("ExcType: message"), on one line and shortened
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
    elsewhere_link: str | None = None  # elsewhere_id when it is a job id
    tasks_seen: list[str] = field(default_factory=list)
    reason: str = ""  # only dead jobs that died for this reason ("expired")
    now_ms: int = 0
    notes: list[str] = field(default_factory=list)  # keys of the wrong type, shown as empty

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
    text = (args_json or "")[:PREVIEW_CHARS]
    if kwargs_json:
        text = f"{text} {kwargs_json[:PREVIEW_CHARS]}"
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def error_summary(error: str, limit: int = ERROR_CHARS) -> str:
    """An error (or any stored text) as one short line: each run of whitespace (newlines
    too) as one space, at most ``limit`` characters, cut with "…"."""
    line = " ".join(error[: limit * 4].split())
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _rows(entries: list[Entry], page: JobPage) -> list[JobRow]:
    members = [member for member, _ in entries]
    found = record.jobs_of(queue_keys(page.queue), members, page.notes)
    rows = []
    for (member, score), job in zip(entries, found, strict=True):
        rows.append(
            JobRow(
                id=text(member, ID_CHARS),
                link_id=job_id_of(member),
                at=Moment(score, page.now_ms),
                task=job.task or "",
                args_preview=_preview(job.args, job.kwargs),
                key=job.key or "",
                attempts=job.attempts or 0,
                max_attempts=job.max_attempts,
                reason=(job.reason or "")[:1000],
                error=error_summary(job.error or ""),
                missing=job.task is None,
            )
        )
    return rows


def _range(start: int, stop: int, page: JobPage) -> list[Entry]:
    return queues.entries(
        page.queue, page.state, start, stop, newest_first=page.order == "desc", notes=page.notes
    )


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
    reason: str = "",
) -> JobPage:
    """One page of a queue's jobs in one state, newest or oldest first, optionally searched
    (exact job id, exact dedupe key, else a bounded scan over task name and key) and filtered
    by exact task name. Raises PageOutOfRange for a page past the end.

    The dedupe key is looked up exactly as given, surrounding spaces included; only the id
    form ignores case and surrounding spaces."""
    task = task.strip()
    now = redis_now()
    result = JobPage(
        queue, state, order, page, [], 0, 0, 1, search, task, now_ms=now, reason=reason
    )
    result.total = result.matched = queues.count(queue, state, result.notes)
    if search and not task:
        if _find_exact(result):
            _check_page(page, result.pages)
            return result
    if search or task or reason:
        _scan(result)
        return result
    result.pages = _pages(result.total)
    _check_page(page, result.pages)
    start = (page - 1) * PAGE_SIZE
    result.rows = _rows(_range(start, start + PAGE_SIZE - 1, result), result)
    result.tasks_seen = sorted({row.task for row in result.rows if row.task})
    return result


def _find_exact(result: JobPage) -> bool:
    """Search by exact job id or exact dedupe key; True when the search was one of those."""
    candidate = result.search.strip().upper()
    mode: Literal["id", "key"]
    if JOB_ID.fullmatch(candidate):
        member, mode = candidate.encode(), "id"
    else:
        found = queues.id_of_key(result.queue, result.search, result.notes)
        if found is None:
            return False
        member, mode = found, "key"
    scores = queues.states_of(result.queue, member, result.notes)
    result.search_mode = mode
    result.matched = 0
    score = scores[result.state]
    if score is not None:
        result.rows = _rows([(member, score)], result)
        result.matched = 1
    else:
        result.elsewhere = next((s for s in STATES if scores[s] is not None), None)
        result.elsewhere_id = text(member, ID_CHARS)
        result.elsewhere_link = job_id_of(member)
    return True


def _scan(result: JobPage) -> None:
    """Filter a bounded window (SEARCH_WINDOW entries from the head in the page's order) by a
    text search over task name and dedupe key and/or an exact task name."""
    needle = result.search.lower()
    matches: list[Entry] = []
    seen_tasks: set[str] = set()
    scanned = 0
    while scanned < SEARCH_WINDOW:
        want = min(SCAN_CHUNK, SEARCH_WINDOW - scanned)
        entries = _range(scanned, scanned + want - 1, result)
        members = [member for member, _ in entries]
        found = record.jobs_of(queue_keys(result.queue), members, result.notes, labels_only=True)
        for entry, job in zip(entries, found, strict=True):
            task, key = job.task or "", job.key or ""
            if task:
                seen_tasks.add(task[:ID_CHARS])
            if result.task and task != result.task:
                continue
            if result.reason and job.reason != result.reason:
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
    result.rows = _rows(matches[start : start + PAGE_SIZE], result)
