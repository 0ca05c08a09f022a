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

    def handle(self, *args: Any, **options: Any) -> None:
        from delayqueue.worker.loop import DelayWorker

        level = VERBOSITY_LEVELS.get(options["verbosity"], logging.INFO)
        logger = logging.getLogger("delayqueue")
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")

        queues = [q.strip() for q in options["queues"].split(",")] if options["queues"] else None
        batch_size, timeout = options["batch_size"], options["visibility_timeout"]
        try:
            if batch_size is not None:
                check_batch_size(batch_size, "--batch-size")
            if timeout is not None:
                check_visibility_timeout(timeout, "--visibility-timeout")
            worker = DelayWorker(queues, batch_size=batch_size, visibility_timeout=timeout)
        except DelayQueueError as exc:
            raise CommandError(str(exc)) from exc
        connections.close_all()  # the loop never touches the database
        code = worker.run(once=options["once"])
        if code:
            raise CommandError(f"delay worker exited with code {code}")
