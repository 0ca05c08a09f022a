"""The W3C trace context a job keeps (docs/tracing.md), as one checked line.

A job scheduled while a span is active keeps the context of its scheduling span in its
record (``JobField.TRACE``, also a part of its packed spec): ``traceparent`` (version 00,
55 characters) and, when there is one, a space and ``tracestate``. Nothing here imports
OpenTelemetry: the delay worker forwards a context whether or not it has it, and the admin
shows the trace id. A context is data from the caller, so it is checked both ways: written
only when valid and within MAX_TRACE_CHARS, read back only when it still is (a context
planted in Redis, malformed or oversized, reads as none: never an error)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from delayqueue.wire import HEADER_TRACE, HEADER_TRACES

# version 00, trace id, parent span id, flags; the all-zero ids are invalid (W3C)
TRACEPARENT = re.compile(r"00-(?!0{32})([0-9a-f]{32})-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
# up to 32 list-members key=value (W3C's grammar: printable ASCII, no ',' or '=' in a value)
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER = rf"[a-z0-9][a-z0-9_\-*/@]{{0,255}}={_VALUE}"
TRACESTATE = re.compile(rf"{_MEMBER}(?:[ \t]*,[ \t]*{_MEMBER}){{0,31}}")
MAX_TRACESTATE_CHARS = 512
TRACEPARENT_CHARS = 55
MAX_TRACE_CHARS = TRACEPARENT_CHARS + 1 + MAX_TRACESTATE_CHARS


def pack_context(traceparent: str, tracestate: str = "") -> str:
    """The line a job keeps, or "" when ``traceparent`` is not valid; a ``tracestate`` that
    is not valid, or longer than W3C's 512 characters, is left out."""
    if not TRACEPARENT.fullmatch(traceparent):
        return ""
    if tracestate and len(tracestate) <= MAX_TRACESTATE_CHARS and TRACESTATE.fullmatch(tracestate):
        return f"{traceparent} {tracestate}"
    return traceparent


def parse(stored: object) -> tuple[str, str] | None:
    """``(traceparent, tracestate)`` of a stored context, or None when it is not one."""
    if not isinstance(stored, str) or not 0 < len(stored) <= MAX_TRACE_CHARS:
        return None
    traceparent, tracestate = stored[:TRACEPARENT_CHARS], stored[TRACEPARENT_CHARS + 1 :]
    if not TRACEPARENT.fullmatch(traceparent):
        return None
    if len(stored) > TRACEPARENT_CHARS:
        if stored[TRACEPARENT_CHARS] != " " or not TRACESTATE.fullmatch(tracestate):
            tracestate = ""  # a bad tracestate is dropped, the traceparent kept
    return traceparent, tracestate


def trace_id(stored: object) -> str | None:
    """The trace id (32 hex digits) of a stored context, for a page, or None."""
    parsed = parse(stored)
    return parsed[0][3:35] if parsed else None


# ---- the context on its way to the Celery side (headers of the dispatch) ----------------


def dispatch_headers(stored: str) -> dict[str, str]:
    """Headers of a job's own message: delayqueue's (HEADER_TRACE), which the Celery side
    reads, and W3C's ``traceparent``/``tracestate``, which Celery's own instrumentation reads
    (so its task span is in the job's trace too)."""
    parsed = parse(stored)
    if parsed is None:
        return {}
    headers = {HEADER_TRACE: stored, "traceparent": parsed[0]}
    if parsed[1]:
        headers["tracestate"] = parsed[1]
    return headers


def batch_headers(jobs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """The headers of a batch message: HEADER_TRACES, job id -> context, for the jobs
    (``(id, context)``) that have one."""
    traces = {job_id: stored for job_id, stored in jobs if stored}
    return {HEADER_TRACES: traces} if traces else {}


def from_request(request: Any, job_id: str | None = None) -> str:
    """The context a dispatch carried for its job (``job_id``: one of a batch's), or ""."""
    if job_id is None:
        stored = getattr(request, HEADER_TRACE, None)
    else:
        traces = getattr(request, HEADER_TRACES, None)
        stored = traces.get(job_id) if isinstance(traces, dict) else None
    return stored if isinstance(stored, str) and parse(stored) is not None else ""
