"""What delayqueue tells the world: one log line and one Django signal per event (events),
Prometheus metrics fed by those signals and by Redis reads (metrics), and an exception
reporter filter that keeps Redis passwords out of error pages (error_reports)."""
