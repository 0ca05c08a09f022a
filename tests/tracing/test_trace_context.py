"""The trace context a job keeps (docs/tracing.md): checked both ways, stored only under an
active span, by every way a job is scheduled, shown in the admin; and delayqueue without
OpenTelemetry or sentry-sdk installed."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from django.conf import settings
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import delayqueue
from delayqueue.engine.keys import JobField, queue_keys
from delayqueue.engine.packing import pack, unpack, without_trace
from delayqueue.errors import InvalidOption
from delayqueue.integrations.trace_context import (
    MAX_TRACE_CHARS,
    dispatch_headers,
    pack_context,
    parse,
    trace_id,
)
from delayqueue.periodic import declare
from delayqueue.periodic.declarations import check_monitor
from tests.support import jobs
from tests.support import tasks_framework as django_tasks
from tests.support.admin_pages import text, url
from tests.support.processes import run_python
from tests.support.stored import packed_specs, stored_job

Q = queue_keys("tests")
PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_context_is_kept_only_when_valid_and_read_back_only_when_it_still_is() -> None:
    assert pack_context(PARENT) == PARENT
    assert pack_context(PARENT, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7") == (
        f"{PARENT} congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
    )
    assert pack_context(PARENT, "=not a tracestate") == PARENT  # the state dropped
    assert pack_context(PARENT, "k=" + "v" * 600) == PARENT  # over W3C's 512 characters
    for bad in (
        "",
        "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # a version we do not read
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333-01",  # a digit short
    ):
        assert pack_context(bad) == "" and parse(bad) is None, bad
    assert parse(f"{PARENT} congo=t61rcWkgMzE") == (PARENT, "congo=t61rcWkgMzE")
    assert parse(f"{PARENT} =bad") == (PARENT, "")  # a bad state read as none
    assert parse(PARENT + "xcongo=t61rcWkgMzE") == (PARENT, "")
    assert pack_context(PARENT + "\n") == ""  # (never written: the spec's separator)
    assert parse(PARENT + " k=" + "v" * MAX_TRACE_CHARS) is None  # oversized: ignored
    assert parse(b"not text") is None and parse(None) is None
    assert trace_id(PARENT) == "0af7651916cd43dd8448eb211c80319c" and trace_id("x") is None
    assert dispatch_headers("garbage") == {}
    assert dispatch_headers(PARENT)["traceparent"] == PARENT


def test_a_spec_pays_for_a_trace_context_only_when_it_has_one() -> None:
    plain = pack("t", "[1]", key="k")
    assert plain == "t\n[1]\n\n\n\nk"  # six fields, as before
    traced = pack("t", "[1]", key="k", trace=PARENT)
    assert traced.count("\n") == 6
    assert unpack(traced) == {"task": "t", "args": "[1]", "tc": PARENT, "key": "k"}
    assert unpack(plain) == {"task": "t", "args": "[1]", "key": "k"}
    # a key with a newline makes the seven-field form, so the key stays whole
    assert unpack(pack("t", "[1]", key="a\nb")) == {"task": "t", "args": "[1]", "key": "a\nb"}
    assert without_trace(traced) == plain and without_trace(plain) == plain


def _stored_trace(r: redis.Redis, job_id: str) -> str | None:
    spec = packed_specs(r, Q).get(job_id)
    assert spec is not None
    return (unpack(spec) or {}).get(JobField.TRACE)


def test_every_way_to_schedule_keeps_the_context_under_an_active_span_and_none_without(
    r: redis.Redis, spans_here: InMemorySpanExporter
) -> None:
    untraced = jobs.record.delay_for("none", seconds=60)
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span("request") as request_span:
        made = [
            jobs.record.delay_for("for", seconds=60),
            jobs.record.delay_until("until", eta=datetime.now(UTC) + timedelta(minutes=1)),
            *jobs.record.delay_many([["many-1"], ["many-2"]], seconds=60),
            *delayqueue.delay_many([delayqueue.spec(jobs.record, ["spec"], delay=60)]),
            asyncio.run(jobs.record.adelay_for("async", seconds=60)),
        ]
        later = datetime.now(UTC) + timedelta(minutes=1)
        result = django_tasks.add.using(run_after=later).enqueue("django", 1, 2)
    request = f"{request_span.get_span_context().trace_id:032x}"
    assert _stored_trace(r, untraced.id) is None
    for job in made:
        assert trace_id(_stored_trace(r, job.id)) == request, job
    django_queue = queue_keys(result.task.queue_name)
    # (the demo's TASKS give an expiry: such a job keeps its spec in its own hash)
    stored = stored_job(r, django_queue, result.id)
    assert trace_id(stored.get(JobField.TRACE)) == request
    # a schedule's spec, which every occurrence shares, keeps none
    with tracer.start_as_current_span("declaring"):
        _, packed, _ = declare._builder(jobs.record.name, ["tick"], None, "tests")()
    assert JobField.TRACE not in (unpack(packed) or {})


def test_the_admin_job_page_shows_the_trace_id(
    r: redis.Redis, admin_client: Any, spans_here: InMemorySpanExporter
) -> None:
    untraced = jobs.record.delay_for("none", seconds=60, on_commit=False)
    with trace.get_tracer("tests").start_as_current_span("request") as span:
        job = jobs.record.delay_for("traced", seconds=60, on_commit=False)
    page = text(admin_client.get(url("job", "tests", job.id)))
    expected = f"{span.get_span_context().trace_id:032x}"
    assert f'<code class="token" id="trace-id">{expected}</code>' in page
    assert "Trace id" not in text(admin_client.get(url("job", "tests", untraced.id)))


def test_monitor_is_true_or_false() -> None:
    assert check_monitor(True) is True
    with pytest.raises(InvalidOption, match="monitor must be True or False"):
        check_monitor("yes")
    with pytest.raises(InvalidOption, match="monitor must be True or False"):
        declare.periodic_task(every=60, monitor=1)  # type: ignore[arg-type]


NO_EXTRAS = """
import sys
for name in ("opentelemetry", "sentry_sdk"):  # as if neither were installed
    sys.modules[name] = None
import django
django.setup()
from delayqueue.integrations import otel, sentry_crons
assert otel.trace is None and sentry_crons.sentry_sdk is None
from delayqueue.engine.packing import unpack
from tests.support import jobs
job = jobs.record.delay_for("no-extras", seconds=60)
run = jobs.record.delay_many([["a"], ["b"]], seconds=60)
assert not any(name.startswith(("opentelemetry", "sentry_sdk")) and sys.modules[name]
               for name in sys.modules)
print(job.id)
"""


def test_delayqueue_imports_and_schedules_without_opentelemetry_or_sentry(
    r: redis.Redis,
) -> None:
    done = run_python(NO_EXTRAS)
    job_id = done.stdout.strip().splitlines()[-1]
    spec = packed_specs(r, Q)[job_id]
    assert spec.count("\n") == 5 and (unpack(spec) or {})["args"] == '["no-extras"]'


def test_system_checks_reject_bad_integration_settings() -> None:
    from django.core.checks import run_checks
    from django.test import override_settings

    bad = {
        "TRACE_SCHEDULING": "spans",
        "SENTRY_CRONS": "yes",
        "SENTRY_CHECKIN_MARGIN": 0,
        "SENTRY_MAX_RUNTIME": 2.5,
    }
    with override_settings(DELAYQUEUE=bad):
        found = [
            (m.id, m.msg) for m in run_checks() if m.id in ("delayqueue.E040", "delayqueue.E041")
        ]
    assert ("delayqueue.E040", "DELAYQUEUE['TRACE_SCHEDULING'] is 'spans'.") in found
    assert sorted(msg for check, msg in found if check == "delayqueue.E041") == [
        "DELAYQUEUE['SENTRY_CHECKIN_MARGIN'] is 0.",
        "DELAYQUEUE['SENTRY_CRONS'] is 'yes'.",
        "DELAYQUEUE['SENTRY_MAX_RUNTIME'] is 2.5.",
    ]
    with override_settings(DELAYQUEUE={"TRACE_SCHEDULING": "context", "SENTRY_CRONS": True}):
        assert not [m for m in run_checks() if m.id in ("delayqueue.E040", "delayqueue.E041")]


def test_context_mode_keeps_the_active_spans_context_with_no_span_of_its_own(
    r: redis.Redis, spans_here: InMemorySpanExporter
) -> None:
    from django.test import override_settings

    context_mode = {**settings.DELAYQUEUE, "TRACE_SCHEDULING": "context"}
    with override_settings(DELAYQUEUE=context_mode):
        with trace.get_tracer("tests").start_as_current_span("request") as span:
            job = jobs.record.delay_for("context", seconds=60)
    context = span.get_span_context()
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"
    assert _stored_trace(r, job.id) == expected
    assert [s.name for s in spans_here.get_finished_spans()] == ["request"]


@pytest.mark.parametrize("scheduling", ["context", "span"])
def test_the_kept_context_carries_the_tracestate_when_there_is_a_valid_one(
    r: redis.Redis, spans_here: InMemorySpanExporter, scheduling: str
) -> None:
    """A caller's tracestate (an incoming request's, say) goes with the job in either mode;
    one past W3C's 512 characters is left out, the traceparent kept."""
    from django.test import override_settings

    def under(state: trace.TraceState) -> str:
        caller = trace.SpanContext(
            0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331, is_remote=True,
            trace_flags=trace.TraceFlags(1), trace_state=state,
        )  # fmt: skip
        mode = {**settings.DELAYQUEUE, "TRACE_SCHEDULING": scheduling}
        with override_settings(DELAYQUEUE=mode):
            with trace.use_span(trace.NonRecordingSpan(caller)):
                job = jobs.record.delay_for("state", seconds=60)
        kept = _stored_trace(r, job.id)
        assert kept is not None and kept[3:35] == PARENT[3:35]
        if scheduling == "context":
            assert kept[:55] == PARENT
        return kept[56:]

    assert under(trace.TraceState([("rojo", "00f067aa0ba902b7")])) == "rojo=00f067aa0ba902b7"
    assert under(trace.TraceState([("k", "v" * 250), ("l", "w" * 250), ("m", "x" * 30)])) == ""


DEMO_CONSOLE = """
import django
django.setup()
from django.test import RequestFactory
from orders_demo.tracing import request_spans
from tests.support import jobs
view = request_spans(lambda request: jobs.record.delay_for("demo", seconds=60))
print("job", view(RequestFactory().post("/orders/")).id)
"""


def test_the_demo_prints_its_spans_with_trace_to_console(r: redis.Redis) -> None:
    done = run_python(DEMO_CONSOLE, TRACE_TO_CONSOLE="true")
    spans = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    request = next(s for s in spans if s["name"] == "POST /orders/")
    # (TRACE_SCHEDULING="context", the default: the job keeps the request span's context)
    [job_id] = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("job ")]
    stored = _stored_trace(r, job_id)
    assert stored is not None
    assert stored[3:35] == request["context"]["trace_id"].removeprefix("0x")
    assert stored[36:52] == request["context"]["span_id"].removeprefix("0x")


API_ONLY = """
import django
django.setup()
from types import SimpleNamespace
from opentelemetry import trace
from delayqueue.integrations import otel
from delayqueue.integrations.trace_context import pack_context
assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
TRACE_ID, SPAN_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

def attempt(stored):
    return SimpleNamespace(queue="q", job_id="j", task="t", number=1, due_ms=None, trace=stored)

def call():
    return otel.scheduling_context("q", "k", "t")

settle = object()
plain = otel.around_attempt(attempt(""), call, settle)
print("plain", plain[0] is call and plain[1] is settle, repr(plain[0]()))
traced = otel.around_attempt(attempt(pack_context(f"00-{TRACE_ID}-{SPAN_ID}-01")), call, settle)
print("traced", traced[0] is call, traced[0]()[3:35] == TRACE_ID)
"""


def test_with_the_api_alone_only_a_job_that_carries_a_context_is_wrapped() -> None:
    # With opentelemetry-api and no SDK's provider set, an attempt span is the current span
    # again: a job without a context runs its call as it is (nothing to pay for), and a job
    # with one still has it made current, so the jobs its task schedules keep its trace.
    done = run_python(API_ONLY)
    lines = done.stdout.splitlines()
    assert "plain True ''" in lines
    assert "traced False True" in lines
