"""One trace from the scheduling to each attempt (docs/tracing.md), with an OpenTelemetry
SDK in every process involved: this test process (the request that schedules), a delay
worker and a real Celery worker, each writing its spans (tests/support/telemetry.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import JobField, new_job_id, queue_keys
from delayqueue.engine.packing import pack
from delayqueue.integrations.trace_context import trace_id
from tests.support import jobs
from tests.support.stored import packed_specs, stored_job
from tests.support.waiting import wait_for

Q = queue_keys("tests")
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _process_spans(spans: list[dict[str, Any]], job_id: str) -> list[dict[str, Any]]:
    found = [
        s
        for s in spans
        if s["name"] == "process tests" and s["attributes"]["messaging.message.id"] == job_id
    ]
    return sorted(found, key=lambda s: s["attributes"]["delayqueue.attempt"])


def _span_id(span: ReadableSpan) -> str:
    context = span.get_span_context()
    assert context is not None
    return f"{context.span_id:016x}"


def _plant(trace_line: str) -> str:
    """A job of ``record`` whose packed spec holds ``trace_line`` as its trace context, as
    something other than delayqueue might write it."""
    job_id = new_job_id()
    packed = pack(jobs.record.name, f'["planted-{job_id}"]', trace=trace_line)
    new = transitions.NewJob(job_id, "delay", 200, "", "keep", packed)
    run(transitions.enqueue(Q, [new], wake_horizon_ms=60_000))
    return job_id


@pytest.mark.parametrize(
    ("celery_instrumented", "scheduling"),
    [(False, "context"), (True, "context"), (True, "span")],
    ids=["celery-plain", "celery-otel", "celery-otel-create-spans"],
)
def test_one_trace_from_the_scheduling_span_to_every_attempt(
    r: redis.Redis,
    spans_here: InMemorySpanExporter,
    traced_workers: Callable[..., Any],
    celery_instrumented: bool,
    scheduling: str,
) -> None:
    workers = traced_workers(celery_instrumented)
    tracer = trace.get_tracer("tests")
    with override_settings(DELAYQUEUE={**settings.DELAYQUEUE, "TRACE_SCHEDULING": scheduling}):
        with tracer.start_as_current_span("POST /orders") as request_span:
            ok = jobs.record.delay_for("traced-ok", seconds=0.3)
            bad = jobs.always_fails.delay_for("traced-bad", seconds=0.3)
            batch = [jobs.batched.delay_for(f"traced-b{i}", seconds=0.3) for i in range(5)]
        untraced = jobs.record.delay_for("untraced", seconds=0.3)
    request_trace = f"{request_span.get_span_context().trace_id:032x}"
    traced = {ok.id, bad.id, *(job.id for job in batch)}

    # The scheduling: with TRACE_SCHEDULING="span", a PRODUCER "create" span per job, a
    # child of the request's, whose context the job keeps; with "context" (the default), no
    # span, the job keeps the request span's own context. The untraced job keeps none, and
    # its spec no byte of it.
    created: dict[str, ReadableSpan] = {
        str(dict(s.attributes or {})["messaging.message.id"]): s
        for s in spans_here.get_finished_spans()
        if s.name == "create tests"
    }
    if scheduling == "context":
        assert created == {}
        created = {job_id: cast(ReadableSpan, request_span) for job_id in traced}
    assert set(created) == traced
    for made in created.values() if scheduling == "span" else []:
        attributes = dict(made.attributes or {})
        assert made.kind is trace.SpanKind.PRODUCER
        assert made.parent is not None
        assert made.parent.span_id == request_span.get_span_context().span_id
        assert attributes["messaging.system"] == "delayqueue"
        assert attributes["messaging.destination.name"] == "tests"
        assert attributes["messaging.operation.type"] == "create"
    specs = packed_specs(r, Q)
    assert trace_id(specs[ok.id].split("\n")[5]) == request_trace
    assert specs[ok.id].split("\n")[5][36:52] == _span_id(created[ok.id])
    assert specs[untraced.id].count("\n") == 5  # six fields: nothing stored

    # Planted contexts: malformed, oversized, a bad tracestate beside a good traceparent.
    malformed = _plant("00-not-a-traceparent-01")
    oversized = _plant(TRACEPARENT + " k=" + "v" * 5000)
    bad_state = _plant(TRACEPARENT + " =bad=state=")

    def done() -> bool:
        spans = workers.spans()
        return (
            len(_process_spans(spans, ok.id)) == 1
            and len(_process_spans(spans, bad.id)) == 3
            and all(_process_spans(spans, job.id) for job in batch)
            and all(_process_spans(spans, j) for j in (malformed, oversized, bad_state))
            # Celery's own span around an attempt ends (and is exported) after ours
            and (not celery_instrumented or _parents_exported(spans, ok.id, bad.id))
        )

    wait_for(done, 60)
    spans = workers.spans()
    by_id = {s["span_id"]: s for s in spans}

    # Each attempt is a CONSUMER "process" span in the request's trace; retries are further
    # attempts in it, and the dead job's last span records the error.
    attempts = [
        *_process_spans(spans, ok.id),
        *_process_spans(spans, bad.id),
        *(s for job in batch for s in _process_spans(spans, job.id)),
    ]
    for span in attempts:
        assert span["kind"] == "CONSUMER"
        assert span["trace_id"] == request_trace
        assert span["attributes"]["messaging.operation.type"] == "process"
        assert span["attributes"]["delayqueue.lateness_ms"] >= 0
    [ok_span] = _process_spans(spans, ok.id)
    assert ok_span["attributes"]["delayqueue.outcome"] == "acked" and ok_span["status"] == "UNSET"
    bad_spans = _process_spans(spans, bad.id)
    assert [s["attributes"]["delayqueue.attempt"] for s in bad_spans] == [1, 2, 3]
    assert [s["attributes"]["delayqueue.outcome"] for s in bad_spans] == ["retry", "retry", "dead"]
    assert all(s["status"] == "ERROR" and "exception" in s["events"] for s in bad_spans)
    assert bad_spans[-1]["attributes"]["error.type"] == "ValueError"

    # Where each sits: a job of its own message inside Celery's own task span when Celery's
    # instrumentation is on (it read the traceparent header, in the job's trace), else right
    # under the scheduling span (the create span, or the request's with "context"); a
    # batch's jobs under their own scheduling spans, beside Celery's span of the batch (a
    # link to it).
    celery_runs = [s for s in spans if s["name"].startswith("run/")]
    for span in [ok_span, *bad_spans]:
        job_id = span["attributes"]["messaging.message.id"]
        parent = by_id.get(span["parent"])
        if celery_instrumented:
            assert parent is not None and parent["name"] == f"run/{span_task(job_id, ok, bad)}"
            assert parent["trace_id"] == request_trace
            # ... whose message Celery's instrumentation in the delay worker published in
            # the job's trace, under its scheduling span
            published = by_id[parent["parent"]]
            assert published["name"].startswith("apply_async/")
            assert published["parent"] == _span_id(created[job_id])
        else:
            assert span["parent"] == _span_id(created[job_id])
    for job in batch:
        [span] = _process_spans(spans, job.id)
        assert span["parent"] == _span_id(created[job.id])
        if celery_instrumented:
            [link] = span["links"]
            assert by_id[link["span_id"]]["name"] == "run/delayqueue.run_batch"
    if celery_instrumented:  # one Celery span per message, none doubled
        singles = [s for s in celery_runs if s["name"] != "run/delayqueue.run_batch"]
        assert len([s for s in singles if s["trace_id"] == request_trace]) == 4
    else:
        assert celery_runs == []

    # The delay worker: a span per pass that handed traced jobs over, linked to each job.
    linked = {
        link["span_id"]
        for s in spans
        if s["name"] == "dispatch tests" and s["kind"] == "PRODUCER"
        for link in s["links"]
    }
    assert _span_id(created[ok.id]) in linked
    assert all(_span_id(created[job.id]) in linked for job in batch)

    # Planted contexts: each job ran; a malformed or oversized context is ignored (its
    # attempt starts a trace of its own), a bad tracestate is dropped and the traceparent
    # kept.
    planted_ran = {run["tag"] for run in jobs.ran("record")}
    assert {f"planted-{j}" for j in (malformed, oversized, bad_state)} <= planted_ran
    for job_id in (malformed, oversized):
        [span] = _process_spans(spans, job_id)
        assert span["trace_id"] != TRACEPARENT[3:35]
        if not celery_instrumented:
            assert span["parent"] is None
    [span] = _process_spans(spans, bad_state)
    assert span["trace_id"] == TRACEPARENT[3:35]
    assert stored_job(r, Q, ok.id) == {} or JobField.TRACE  # (acked: gone)
    for process in workers.processes:
        assert process.alive(), process.output()


def span_task(job_id: str, ok: Any, bad: Any) -> str:
    return jobs.record.name if job_id == ok.id else jobs.always_fails.name


def _parents_exported(spans: list[dict[str, Any]], *job_ids: str) -> bool:
    """Every process span of ``job_ids`` has its parent among ``spans``."""
    exported = {s["span_id"] for s in spans}
    return all(
        span["parent"] in exported for job_id in job_ids for span in _process_spans(spans, job_id)
    )
