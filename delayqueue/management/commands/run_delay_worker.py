"""``python manage.py run_delay_worker``: hand due delayed jobs to Celery."""

from __future__ import annotations

import logging
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from delayqueue.errors import DelayQueueError
from delayqueue.validators import check_batch_size, check_visibility_timeout

VERBOSITY_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class Command(BaseCommand):
    help = (
        "Move due delayed jobs to Celery at their due time. Several may run at once on the "
        "same queues. SIGTERM/SIGINT stop after the current batch; a second one exits at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            help="comma-separated queue names (default: every known queue, watched for new ones)",
        )
        parser.add_argument("--batch-size", type=int, help="jobs claimed per pass")
        parser.add_argument(
            "--visibility-timeout",
            type=float,
            help="seconds a dispatched job may stay unacked before it runs again",
        )
        parser.add_argument(
            "--once", action="store_true", help="dispatch what is due now, then exit (cron, tests)"
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve Prometheus metrics on this port (/metrics): this worker's counters and "
            "histograms, and every queue's gauges read from Redis",
        )
        parser.add_argument(
            "--metrics-address",
            default="0.0.0.0",
            help="the address --metrics-port listens on (default 0.0.0.0)",
        )
        parser.add_argument(
            "--health-file",
            metavar="PATH",
            help="touch this file after each pass, at most every second (for liveness probes: "
            "its age is the time since the last completed pass)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from delayqueue.worker.loop import DelayWorker

        level = VERBOSITY_LEVELS.get(options["verbosity"], logging.INFO)
        logger = logging.getLogger("delayqueue")
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")

        queues = [q.strip() for q in options["queues"].split(",")] if options["queues"] else None
        batch_size, timeout = options["batch_size"], options["visibility_timeout"]
        port = options["metrics_port"]
        if port is not None and not 0 < port < 65536:
            raise CommandError(f"--metrics-port {port} is not a TCP port (1-65535)")
        try:
            if batch_size is not None:
                check_batch_size(batch_size, "--batch-size")
            if timeout is not None:
                check_visibility_timeout(timeout, "--visibility-timeout")
            worker = DelayWorker(
                queues,
                batch_size=batch_size,
                visibility_timeout=timeout,
                health_file=options["health_file"],
            )
        except DelayQueueError as exc:
            raise CommandError(str(exc)) from exc
        if port is not None:
            serve_metrics(port, options["metrics_address"], logger)
        connections.close_all()  # the loop never touches the database
        code = worker.run(once=options["once"])
        if code:
            raise CommandError(f"delay worker exited with code {code}")


def serve_metrics(port: int, address: str, logger: logging.Logger) -> None:
    """Serve /metrics from a thread of this process: its own counters and histograms (not
    the sum of a multiprocess directory: the Django view serves that) and the gauges."""
    from prometheus_client import start_http_server

    from delayqueue.metrics import multiprocess_dir, registry  # connects the receivers

    if multiprocess_dir():
        logger.warning(
            "PROMETHEUS_MULTIPROC_DIR is set: this worker's counters are also written there, "
            "so a view serving that directory counts them too; scrape one of the two, or run "
            "the delay worker without PROMETHEUS_MULTIPROC_DIR (docs/operations.md)"
        )
    try:
        start_http_server(port, address, registry=registry(multiprocess=False))
    except OSError as exc:
        raise CommandError(
            f"cannot serve metrics on {address}:{port}: {exc} (is the port taken? "
            "choose another with --metrics-port)"
        ) from exc
    logger.info("serving Prometheus metrics on http://%s:%s/metrics", address, port)
