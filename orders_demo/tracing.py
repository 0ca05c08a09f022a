"""``TRACE_TO_CONSOLE=true``: every process of the demo (the web server, the delay workers,
the Celery workers) prints its OpenTelemetry spans to its console, one JSON line each, and
each request of the web server is a span (a small stand-in for opentelemetry-instrumentation-
django): an order's ``close_unpaid_order`` then runs, 30 minutes later, in the trace of the
request that created the order (docs/tracing.md). Needs ``opentelemetry-sdk``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import ImproperlyConfigured


def export_to_console() -> None:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        raise ImproperlyConfigured(
            "TRACE_TO_CONSOLE=true needs OpenTelemetry's SDK: pip install opentelemetry-sdk"
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": "orders_demo"}))
    exporter = ConsoleSpanExporter(formatter=lambda span: span.to_json(indent=None) + "\n")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def request_spans(get_response: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Middleware: each request a SERVER span, the active span of its view."""
    from opentelemetry import trace

    tracer = trace.get_tracer("orders_demo")

    def middleware(request: Any) -> Any:
        name = f"{request.method} {request.path}"
        with tracer.start_as_current_span(name, kind=trace.SpanKind.SERVER):
            return get_response(request)

    return middleware
