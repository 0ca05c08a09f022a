"""Tracing and monitors in every process of a test (tests/tracing/): the test process, the
delay workers and the Celery workers it starts.

A child started with ``DQ_TEST_OTEL_DIR`` sets an OpenTelemetry SDK whose spans go, one
JSON line each, to ``<dir>/<pid>.jsonl`` (``SpanFile``), the test reading them all back
(``read_spans``); with ``DQ_TEST_OTEL_CELERY=1`` it also turns Celery's own instrumentation
on. With ``DQ_TEST_SENTRY_DSN`` it initialises sentry-sdk on that DSN (a local endpoint the
test starts: ``SentryEndpoint``). tests/settings.py calls ``set_up`` when either is set."""

from __future__ import annotations

import gzip
import json
import os
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


def set_up() -> None:
    if os.environ.get("DQ_TEST_OTEL_DIR"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(SpanFile(os.environ["DQ_TEST_OTEL_DIR"])))
        trace.set_tracer_provider(provider)
        if os.environ.get("DQ_TEST_OTEL_CELERY") == "1":
            from opentelemetry.instrumentation.celery import CeleryInstrumentor

            CeleryInstrumentor().instrument()
    if os.environ.get("DQ_TEST_SENTRY_DSN"):
        import sentry_sdk

        sentry_sdk.init(
            dsn=os.environ["DQ_TEST_SENTRY_DSN"],
            default_integrations=False,
            auto_enabling_integrations=False,
        )


def span_record(span: Any) -> dict[str, Any]:
    """A finished SDK span as one JSON-able dict."""
    ctx = span.get_span_context()
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent": f"{span.parent.span_id:016x}" if span.parent else None,
        "links": [
            {"trace_id": f"{link.context.trace_id:032x}", "span_id": f"{link.context.span_id:016x}"}
            for link in span.links
        ],
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "events": [event.name for event in span.events],
        "pid": os.getpid(),
    }


class SpanFile(SpanExporter):
    """An OpenTelemetry span exporter: one JSON line per span, in a file per process."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        lines = "".join(json.dumps(span_record(span)) + "\n" for span in spans)
        with (self.directory / f"{os.getpid()}.jsonl").open("a") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def read_spans(directory: Path) -> list[dict[str, Any]]:
    spans = []
    for path in sorted(directory.glob("*.jsonl")):
        spans += [json.loads(line) for line in path.read_text().splitlines() if line]
    return spans


class SentryEndpoint:
    """A local HTTP server that takes Sentry's envelopes (no outside network): the items it
    received, each ``(headers, payload)``, and a DSN that points at it."""

    def __init__(self) -> None:
        self.items: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.lock = threading.Lock()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                endpoint.received(body)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def dsn(self) -> str:
        return f"http://public@127.0.0.1:{self.server.server_address[1]}/1"

    def received(self, body: bytes) -> None:
        lines = body.split(b"\n")
        index = 1  # (line 0: the envelope's headers)
        while index < len(lines) and lines[index]:
            headers = json.loads(lines[index])
            length = headers.get("length")
            if length is not None:
                rest = b"\n".join(lines[index + 1 :])
                payload_bytes, remainder = rest[:length], rest[length + 1 :]
                lines = [b"", *remainder.split(b"\n")]
                index = 1
            else:
                payload_bytes = lines[index + 1]
                index += 2
            try:
                payload = json.loads(payload_bytes)
            except ValueError:
                payload = {}
            with self.lock:
                self.items.append((headers, payload))

    def check_ins(self) -> list[dict[str, Any]]:
        with self.lock:
            return [payload for headers, payload in self.items if headers.get("type") == "check_in"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
