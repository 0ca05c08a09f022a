"""OpenTelemetry spans across the delay (docs/tracing.md), following OpenTelemetry's
messaging conventions with ``messaging.system = "delayqueue"``.

The one module that imports OpenTelemetry, and only if it is installed
(``delayqueue[otel]``). Without it each hook is one test of ``trace is None``; with it and no
active span at scheduling, nothing is stored. The hooks:

- ``scheduling_context`` (producer): under an active span, the context the job keeps
  (``trace_context``): the active span's (``TRACE_SCHEDULING = "context"``, the default), or
  that of a PRODUCER span ``create <queue>`` made for the job (``"span"``);
- ``firing`` (delay worker): a PRODUCER span ``fire <queue>`` around a step that moves on
  schedules whose occurrence came due, whose context each occurrence it fires keeps;
  ``active_context`` for an extra run of a schedule (run now) under an active span;
- ``dispatched`` (delay worker): one PRODUCER span per pass that hands traced jobs to
  Celery, with a link to each job's context (in the job's trace when it carries one job);
- ``around_attempt`` (Celery side): a CONSUMER span ``process <queue>`` per attempt, in the
  job's trace: inside Celery's own task span when that is in the same trace (its
  instrumentation read the ``traceparent`` header of the job's own message), else beside it,
  its child in the job's trace with a link to Celery's span (a batch's jobs).

A failure of the tracing itself is logged and never changes what the job does.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from delayqueue.conf import get_settings
from delayqueue.integrations.trace_context import MAX_TRACESTATE_CHARS, pack_context, parse
from delayqueue.wire import HEADER_TRACE

try:
    from opentelemetry import context as context_api
    from opentelemetry import trace
    from opentelemetry.environment_variables import OTEL_PYTHON_TRACER_PROVIDER
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError:  # the optional extra is not installed: every hook is a no-op
    trace = None  # type: ignore[assignment]
    OTEL_PYTHON_TRACER_PROVIDER = ""

# (read once: the API reads it at each get_tracer_provider until a provider is set)
_PROVIDER_IN_ENVIRONMENT = bool(OTEL_PYTHON_TRACER_PROVIDER) and (
    OTEL_PYTHON_TRACER_PROVIDER in os.environ
)

logger = logging.getLogger(__name__)

SYSTEM = "delayqueue"


class Job(Protocol):
    """What the delay worker's hook reads of a claimed job."""

    queue: str
    id: str
    trace: str
    claimed_ms: int | None


class AttemptLike(Protocol):
    queue: str
    job_id: str
    task: str
    number: int
    due_ms: int | None
    trace: str


_tracer: Any = None


def _get_tracer() -> Any:
    """delayqueue's tracer, from the provider set when it is first used (a proxy until the
    application sets one)."""
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer("delayqueue")
    return _tracer


def _stored(ctx: Any) -> str:
    """The line a job keeps for the valid SpanContext ``ctx`` (trace_context.pack_context):
    its traceparent is well formed by construction (ints), so only a tracestate, when there
    is one, is checked."""
    traceparent = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags & 0xFF:02x}"
    state = ctx.trace_state
    if not state:
        return traceparent
    header = state.to_header()
    return pack_context(traceparent, header if len(header) <= MAX_TRACESTATE_CHARS else "")


def _remote(stored: str) -> Any:
    """The SpanContext of a stored context, or None (malformed: ignored)."""
    parsed = parse(stored)
    if parsed is None:
        return None
    traceparent, tracestate = parsed
    _, trace_id, span_id, flags = traceparent.split("-")
    return trace.SpanContext(
        int(trace_id, 16),
        int(span_id, 16),
        is_remote=True,
        trace_flags=trace.TraceFlags(int(flags, 16)),
        trace_state=trace.TraceState.from_header([tracestate]) if tracestate else None,
    )


def _attributes(queue: str, operation: str, kind: str) -> dict[str, Any]:
    attributes = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": kind,
    }
    if operation != kind:  # (the SDK checks each attribute it is given: ~1 µs apiece)
        attributes["messaging.operation.name"] = operation
    return attributes


_created: dict[str, dict[str, Any]] = {}  # queue -> the create span's constant attributes


def _create_attributes(queue: str, job_id: str, task: str) -> dict[str, Any]:
    found = _created.get(queue)
    if found is None:
        found = _attributes(queue, "create", "create")
        if len(_created) < 1_000:
            _created[queue] = found
    return {**found, "messaging.message.id": job_id, "delayqueue.task": task}


def scheduling_context(queue: str, job_id: str, task: str) -> str:
    """Under an active span, the context the job keeps: by default
    (``DELAYQUEUE["TRACE_SCHEDULING"] = "context"``) the active span's own, no span; with
    ``"span"``, that of a PRODUCER ``create <queue>`` span made for the job (an SDK span
    costs more than the 15 % of a ``delay_for`` it may: docs/tracing.md, "What it costs").
    Nothing without an active span."""
    current = _active_span_context()
    if current is None:
        return ""
    try:
        if get_settings().trace_scheduling == "context":
            return _stored(current)
        span = _get_tracer().start_span(
            f"create {queue}",
            kind=SpanKind.PRODUCER,
            attributes=_create_attributes(queue, job_id, task),
        )
        span.end()
        return _stored(span.get_span_context())
    except Exception:
        logger.warning("tracing: the scheduling context of job %s failed", job_id, exc_info=True)
        return ""


def active_context() -> str:
    """The context a job keeps of the span active here, with no span of its own; "" when
    none is (or without OpenTelemetry). An extra run of a schedule from the admin's request,
    say (docs/tracing.md, "Periodic jobs")."""
    current = _active_span_context()
    return "" if current is None else _stored(current)


def _active_span_context() -> Any:
    """The active span's SpanContext when it is valid, else None (and without OpenTelemetry).
    A delay_for's question: an empty context, what most calls meet, is answered before the
    API's look-up of the current span."""
    if trace is None or not context_api.get_current():  # (an empty context holds no span)
        return None
    current = trace.get_current_span().get_span_context()
    return current if current.is_valid else None


class Firing:
    """What ``firing`` yields: the context the occurrences it fires keep ("" for none)."""

    def __init__(self, span: Any = None) -> None:
        self.span = span
        ctx = span.get_span_context() if span is not None else None
        self.context = _stored(ctx) if ctx is not None and ctx.is_valid else ""

    def fired(self, count: int) -> None:
        """How many occurrences this step fired (another delay worker may fire some)."""
        if self.span is not None:
            self.span.set_attribute("delayqueue.fired", count)


@contextmanager
def firing(queue: str, due: int) -> Iterator[Firing]:
    """A delay worker's step that moves on the ``due`` schedules of ``queue`` whose
    occurrence came due: a PRODUCER span ``fire <queue>`` (a child of the active span, if
    any; made only when something is due), whose context each occurrence it fires keeps, so
    that the occurrence's attempts are in its trace. Without an SDK that records, nothing."""
    if trace is None:
        yield Firing()
        return
    try:
        attributes = _attributes(queue, "fire", "create")
        attributes["messaging.batch.message_count"] = due
        span = _get_tracer().start_span(
            f"fire {queue}", kind=SpanKind.PRODUCER, attributes=attributes
        )
        step = Firing(span)
    except Exception:
        logger.warning("tracing: the fire span of queue %s failed", queue, exc_info=True)
        yield Firing()
        return
    try:
        yield step
    except BaseException as exc:
        _ended(span, exc)
        raise
    _ended(span, None)


def _ended(span: Any, exc: BaseException | None) -> None:
    try:
        if exc is not None:
            span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        span.end()
    except Exception:
        logger.warning("tracing: a span could not end", exc_info=True)


def dispatched(jobs: Sequence[Job]) -> None:
    """One span for a pass's hand-off of traced jobs to Celery (none when no job of it is
    traced), from the claim to now, with a link to each job's context."""
    if trace is None:
        return
    traced = [(job, ctx) for job in jobs if job.trace and (ctx := _remote(job.trace))]
    if not traced:
        return
    try:
        queues = sorted({job.queue for job, _ in traced})
        attributes = _attributes(queues[0] if len(queues) == 1 else "", "dispatch", "send")
        if len(queues) > 1:
            del attributes["messaging.destination.name"]
        attributes["messaging.batch.message_count"] = len(traced)
        links = [Link(ctx, {"messaging.message.id": job.id}) for job, ctx in traced]
        # one job: the span is in its trace, as the user reads it; several: its own trace
        parent = (
            trace.set_span_in_context(trace.NonRecordingSpan(traced[0][1]))
            if len(traced) == 1
            else context_api.Context()
        )
        claimed = [job.claimed_ms for job, _ in traced if job.claimed_ms is not None]
        start = min(claimed) * 1_000_000 if claimed else None
        name = f"dispatch {queues[0]}" if len(queues) == 1 else "dispatch"
        span = _get_tracer().start_span(
            name,
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes=attributes,
            links=links,
            start_time=start,
        )
        span.end()
    except Exception:
        logger.warning("tracing: the dispatch span failed", exc_info=True)


@contextmanager
def job_context(headers: dict[str, Any]) -> Iterator[None]:
    """The context of a job's own message (its HEADER_TRACE) made current while Celery's
    ``send_task`` publishes it: Celery's instrumentation, where it is on in the delay worker,
    then makes its publish span in the job's trace, and the traceparent it writes over ours
    stays in it."""
    stored = headers.get(HEADER_TRACE) if trace is not None else None
    ctx = _remote(stored) if stored else None
    if ctx is None:
        yield
        return
    token = context_api.attach(trace.set_span_in_context(trace.NonRecordingSpan(ctx)))
    try:
        yield
    finally:
        context_api.detach(token)


class _Settle(Protocol):
    def add(self, call: Any, report: Callable[[Any], None], unsent: str) -> None: ...


class _AttemptSpan:
    """The span of one attempt: started when its call starts, ended when its settling call
    reported the outcome (a batch's, at the batch's end) with the call's own end time."""

    def __init__(self, attempt: AttemptLike, call: Callable[[], Any], settle: _Settle) -> None:
        self.attempt, self.inner_call, self.inner = attempt, call, settle
        self.span: Any = None
        self.raised: Exception | None = None
        self.ended_ns: int | None = None

    def call(self) -> Any:
        try:
            self.span = self._start()
            token = context_api.attach(trace.set_span_in_context(self.span))
        except Exception:
            logger.warning("tracing: the span of job %s failed", self.attempt.job_id, exc_info=True)
            self.span = None
            return self.inner_call()
        try:
            return self.inner_call()
        except Exception as exc:
            self.raised = exc
            raise
        finally:
            self.ended_ns = time.time_ns()
            context_api.detach(token)

    def _start(self) -> Any:
        attempt = self.attempt
        attributes = _attributes(attempt.queue, "process", "process")
        attributes["messaging.message.id"] = attempt.job_id
        attributes["delayqueue.task"] = attempt.task
        attributes["delayqueue.attempt"] = attempt.number
        if attempt.due_ms is not None:
            attributes["delayqueue.lateness_ms"] = time.time_ns() // 1_000_000 - attempt.due_ms
        job_ctx = _remote(attempt.trace) if attempt.trace else None
        current = trace.get_current_span().get_span_context()
        parent, links = None, None  # (None: the current context, Celery's span if any)
        if job_ctx is not None and not (current.is_valid and current.trace_id == job_ctx.trace_id):
            parent = trace.set_span_in_context(trace.NonRecordingSpan(job_ctx))
            links = [Link(current)] if current.is_valid else None
        return _get_tracer().start_span(
            f"process {attempt.queue}",
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
        )

    def add(self, call: Any, report: Callable[[Any], None], unsent: str) -> None:
        def reported(reply: Any) -> None:
            try:
                report(reply)
            finally:
                self._end(reply)

        self.inner.add(call, reported, unsent)

    def _end(self, reply: Any) -> None:
        span = self.span
        if span is None:
            return
        try:
            if self.raised is None:
                outcome = "acked"
            elif isinstance(reply, str):
                outcome = reply  # "retry", "dead" or "stale" (engine.transitions.FailOutcome)
            else:
                outcome = "unrecorded"
            span.set_attribute("delayqueue.outcome", outcome)
            if self.raised is not None:
                span.record_exception(self.raised)
                span.set_attribute("error.type", type(self.raised).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(self.raised).__name__}"))
            span.end(end_time=self.ended_ns)
        except Exception:
            logger.warning("tracing: the span of job %s failed", self.attempt.job_id, exc_info=True)


_provider_seen = False  # a provider, once set, is the process's for good (OpenTelemetry)


def _provider_set() -> bool:
    """Whether a tracer provider was set (an SDK's, in practice): until then the API hands
    out its proxy, whose spans record nothing. Asked per attempt: until one is set, only
    the API's own first test (its global still None, none named in the environment)."""
    global _provider_seen
    if not _provider_seen:
        if getattr(trace, "_TRACER_PROVIDER", "") is None and not _PROVIDER_IN_ENVIRONMENT:
            return False
        provider = trace.get_tracer_provider()
        _provider_seen = not isinstance(
            provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        )
    return _provider_seen


def around_attempt(
    attempt: AttemptLike, call: Callable[[], Any], settle: Any
) -> tuple[Callable[[], Any], Any]:
    """``call`` and ``settle`` of one attempt, traced. With the API alone (no SDK's tracer
    provider set), a job that carries no trace context gets no span: the API's span would
    be the current one again, so it would only cost (about 30 µs of a job's CPU on the
    Celery side). A job that carries one still gets its context made current, so that the
    jobs its task schedules keep it."""
    if trace is None or (not attempt.trace and not _provider_set()):
        return call, settle
    spanned = _AttemptSpan(attempt, call, settle)
    return spanned.call, spanned
