"""A schedule's occurrence in a trace (docs/tracing.md, "Periodic jobs"): the delay worker's
step that fires an occurrence is a ``fire <queue>`` span whose context the occurrence keeps,
so that its attempt is in that trace; under an active span, that span's trace."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from delayqueue.engine import schedules
from delayqueue.engine.keys import JobField, queue_keys
from delayqueue.engine.packing import unpack, with_trace
from delayqueue.integrations import otel
from delayqueue.periodic import declarations, planner
from delayqueue.periodic import declare as declaring
from delayqueue.periodic.identity import occurrence_id
from delayqueue.services import schedules as schedule_service
from tests.support import jobs
from tests.support.stored import packed_specs
from tests.support.waiting import wait_for

Q = "tests"
RECORD = "tests.support.jobs.record"
MINUTE = 60_000


@pytest.fixture
def tick(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Schedule "tick" (every minute, on queue "tests") planned: its next occurrence's ms."""
    monkeypatch.setattr(declarations, "_in_code", {})
    build = declaring._builder(RECORD, ("tick",), None, Q)
    declarations.add(
        declaring._declared(
            "tick", RECORD, cron=None, every=60, timezone=None, missed="once", source="code",
            build=build,
        )
    )  # fmt: skip
    planner.reconcile()
    [found] = schedules.stored(Q, "tick")
    assert found.next_ms is not None
    yield found.next_ms


def _kept(r: redis.Redis, job_id: str) -> str | None:
    """The trace context the never-claimed job ``job_id`` keeps in its packed spec."""
    spec = packed_specs(r, queue_keys(Q)).get(job_id)
    assert spec is not None, job_id
    return (unpack(spec) or {}).get(JobField.TRACE)


def _schedule_spec() -> str:
    [found] = schedules.stored(Q, "tick")
    assert found.spec
    return found.spec


def _ids(span: Any) -> str:
    context = span.get_span_context()
    return f"{context.trace_id:032x}-{context.span_id:016x}"


def test_the_occurrence_a_step_fires_keeps_the_context_of_its_fire_span(
    r: redis.Redis, spans_here: InMemorySpanExporter, tick: int
) -> None:
    assert planner.fire_due(Q, now_ms=tick - 1) == []  # nothing due: no span
    assert spans_here.get_finished_spans() == ()
    [fired] = planner.fire_due(Q, now_ms=tick + 5)
    assert fired.job_id == occurrence_id("tick", tick)
    [span] = spans_here.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "fire tests" and span.kind is trace.SpanKind.PRODUCER
    assert span.parent is None  # (no span active: a trace of its own)
    assert attributes["messaging.system"] == "delayqueue"
    assert attributes["messaging.destination.name"] == Q
    assert attributes["messaging.batch.message_count"] == 1
    assert attributes["delayqueue.fired"] == 1
    kept = _kept(r, fired.job_id)
    assert kept is not None and kept[3:52] == _ids(span)
    # the next occurrence, written by the same step, and the schedule's spec keep none
    assert _kept(r, occurrence_id("tick", tick + MINUTE)) is None
    assert JobField.TRACE not in (unpack(_schedule_spec()) or {})


def test_under_an_active_span_the_fired_occurrence_is_in_that_trace(
    r: redis.Redis, spans_here: InMemorySpanExporter, tick: int
) -> None:
    with trace.get_tracer("tests").start_as_current_span("a pass") as active:
        [fired] = planner.fire_due(Q, now_ms=tick + 5)
    [span] = [s for s in spans_here.get_finished_spans() if s.name == "fire tests"]
    assert span.parent is not None
    assert span.parent.span_id == active.get_span_context().span_id
    kept = _kept(r, fired.job_id)
    assert kept is not None and kept[3:52] == _ids(span)
    assert kept[3:35] == f"{active.get_span_context().trace_id:032x}"
    # an extra run under an active span (what run-now keeps, from the admin's request)
    with trace.get_tracer("tests").start_as_current_span("POST run now") as request:
        line = otel.active_context()
    assert line[3:52] == _ids(request)
    assert (unpack(with_trace(_schedule_spec(), line)) or {})[JobField.TRACE] == line


def test_run_now_under_an_active_span_keeps_its_context_and_without_one_none(
    r: redis.Redis, spans_here: InMemorySpanExporter, tick: int
) -> None:
    with trace.get_tracer("tests").start_as_current_span("POST run now") as request:
        in_a_request = schedule_service.run_now("tick")
    plain = schedule_service.run_now("tick")
    assert in_a_request is not None and plain is not None
    kept = _kept(r, in_a_request)
    assert kept is not None and kept[3:52] == _ids(request)
    assert _kept(r, plain) is None
    assert JobField.TRACE not in (unpack(_schedule_spec()) or {})  # the schedule keeps none


def test_an_occurrence_claimed_before_its_step_is_left_as_it_is(
    r: redis.Redis, spans_here: InMemorySpanExporter, tick: int
) -> None:
    """A worker's claim came first (it moved the job into its hash): nothing is added."""
    job_id = occurrence_id("tick", tick)
    spec = packed_specs(r, queue_keys(Q))[job_id]
    # as claim.lua leaves it: the spec unpacked into the job's hash, a token, no bucket entry
    claimed = {**(unpack(spec) or {}), JobField.TOKEN: "1"}
    r.hset(queue_keys(Q).job(job_id), items=[part for pair in claimed.items() for part in pair])
    r.hdel(queue_keys(Q).spec_bucket(job_id), job_id)
    [fired] = planner.fire_due(Q, now_ms=tick + 5)
    assert fired.job_id == job_id
    assert JobField.TRACE not in r.hgetall(queue_keys(Q).job(job_id))


def test_each_occurrence_run_by_the_workers_is_in_the_trace_of_the_step_that_fired_it(
    r: redis.Redis, traced_workers: Callable[..., Any]
) -> None:
    """A delay worker and a Celery worker, each with the SDK: a schedule every second; each
    attempt's process span is a child of the delay worker's fire span of its occurrence."""
    every = {"task": RECORD, "args": ["every-second"], "queue": Q, "every": 1}
    workers = traced_workers(DQ_TEST_SCHEDULES=json.dumps({"every-second": every}))

    def processed() -> list[dict[str, Any]]:
        return [s for s in workers.spans() if s["name"] == "process tests"]

    wait_for(lambda: len(processed()) >= 2, 60)
    spans = workers.spans()
    fires = {s["span_id"]: s for s in spans if s["name"] == "fire tests"}
    for span in processed():
        fire = fires.get(span["parent"])
        assert fire is not None, span
        assert span["trace_id"] == fire["trace_id"]
        assert fire["kind"] == "PRODUCER" and fire["attributes"]["delayqueue.fired"] >= 1
    assert len({s["trace_id"] for s in processed()}) == len(processed())  # one trace each
    assert all(run["tag"] == "every-second" for run in jobs.ran("record"))
    for process in workers.processes:
        assert process.alive(), process.output()
