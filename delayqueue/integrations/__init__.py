"""Optional integrations with libraries the user may not have: OpenTelemetry (``otel``) and
Sentry's cron monitors (``sentry_crons``), each in its own module, the only one that imports
its library, and a no-op without it. ``trace_context`` is the W3C context a job keeps,
checked, with no library. See docs/tracing.md."""
