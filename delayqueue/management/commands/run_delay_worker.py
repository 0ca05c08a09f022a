"""``python manage.py run_delay_worker``: hand due delayed jobs to Celery."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from delayqueue.engine.keys import check_queue_name
from delayqueue.errors import DelayQueueError
from delayqueue.validators import check_claim_size, check_visibility_timeout
from delayqueue.worker.fleet import MAX_LOOPS, Fleet, join_supervisor, loop_environment

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from prometheus_client.registry import Collector

MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"
VERBOSITY_LEVELS = {0: logging.ERROR, 1: logging.INFO, 2: logging.DEBUG, 3: logging.DEBUG}


class RenamedFlag(argparse.Action):
    """A flag that also answers to an old name (the last of ``option_strings``), which
    works for one release and says so on stderr."""

    def __call__(
        self, parser: Any, namespace: Any, values: Any, option_string: str | None = None
    ) -> None:
        if option_string == self.option_strings[-1]:
            sys.stderr.write(
                f"{option_string} is renamed {self.option_strings[0]}; the old name stops "
                "working in the next release\n"
            )
        setattr(namespace, self.dest, values)


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
        parser.add_argument(
            "--claim-size",
            "--batch-size",  # its old name, with a warning (RenamedFlag), for one release
            dest="claim_size",
            type=int,
            action=RenamedFlag,
            help="jobs claimed per pass (default: CLAIM_SIZE)",
        )
        parser.add_argument(
            "--visibility-timeout",
            type=float,
            help="seconds a job may stay in flight without finishing before it is run "
            "again: counted from its dispatch, and again from the moment its task begins on the "
            "Celery side (the Celery side uses this value, sent with the job, not its own "
            "VISIBILITY_TIMEOUT); a job's own visibility_timeout wins over both "
            "(default: VISIBILITY_TIMEOUT)",
        )
        parser.add_argument(
            "--once",
            action="store_true",
            help="dispatch what is due now, then exit (cron, tests); with --concurrency, "
            "every loop drains once and the command exits when all have",
        )
        parser.add_argument(
            "--concurrency",
            metavar="N",
            default=1,
            help=f"run N dispatch loops (1-{MAX_LOOPS}, default 1). With N > 1 this process "
            "supervises N child processes with these options: it passes SIGTERM/SIGINT on to "
            "them, starts again one that dies (with a growing backoff), and they die with it",
        )
        parser.add_argument(
            "--metrics-port",
            type=int,
            help="serve Prometheus metrics on this port (/metrics): this worker's counters and "
            "histograms (with --concurrency, the sum of every loop's: they count into a folder of "
            "their own, not PROMETHEUS_MULTIPROC_DIR), and every queue's gauges read from Redis",
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
            "its age is the time since the last completed pass; with --concurrency, since the "
            "last pass of the loop that passed least recently, so it ages while any loop is "
            "dead or stuck)",
        )
        # A loop of a supervisor (--concurrency N): its index, and the supervisor's pid.
        parser.add_argument("--loop-index", type=int, help=argparse.SUPPRESS)
        parser.add_argument("--loop-of", type=int, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        from delayqueue.worker.loop import DelayWorker

        level = VERBOSITY_LEVELS.get(options["verbosity"], logging.INFO)
        logger = logging.getLogger("delayqueue")
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")

        loop_index, supervisor = options["loop_index"], options["loop_of"]
        if supervisor is not None and not join_supervisor(supervisor):
            logger.warning(
                "loop %s: its supervisor (pid %s) is gone; exiting", loop_index, supervisor
            )
            return
        concurrency = loop_count(options["concurrency"])
        queues = [q.strip() for q in options["queues"].split(",")] if options["queues"] else None
        check_options(options, queues)
        if concurrency > 1:
            run_loops(concurrency, options, logger)
            return
        try:
            worker = DelayWorker(
                queues,
                claim_size=options["claim_size"],
                visibility_timeout=options["visibility_timeout"],
                health_file=options["health_file"],
            )
        except DelayQueueError as exc:
            raise CommandError(str(exc)) from exc
        if options["metrics_port"] is not None:
            serve_metrics(options["metrics_port"], options["metrics_address"], logger)
        connections.close_all()  # the loop never touches the database
        if loop_index is not None:
            logger.info("loop %s (pid %s) starting", loop_index, os.getpid())
        code = worker.run(once=options["once"])
        if loop_index is not None:
            logger.info("loop %s (pid %s) stopped", loop_index, os.getpid())
        if code:
            raise CommandError(f"delay worker exited with code {code}")


def check_options(options: dict[str, Any], queues: list[str] | None) -> None:
    """The options a worker checks when it is built, checked before any loop starts."""
    port = options["metrics_port"]
    if port is not None and not 0 < port < 65536:
        raise CommandError(f"--metrics-port {port} is not a TCP port (1-65535)")
    claim_size, timeout = options["claim_size"], options["visibility_timeout"]
    try:
        if claim_size is not None:
            check_claim_size(claim_size, "--claim-size")
        if timeout is not None:
            check_visibility_timeout(timeout, "--visibility-timeout")
        for queue in queues or []:
            check_queue_name(queue)
    except DelayQueueError as exc:
        raise CommandError(str(exc)) from exc


def loop_count(value: object) -> int:
    """``--concurrency`` as a number of loops, or a CommandError that says what is wanted."""
    count: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str):
        try:
            count = int(value)
        except ValueError:
            count = None
    if count is None or not 0 < count <= MAX_LOOPS:
        raise CommandError(
            f"--concurrency must be a whole number of loops from 1 to {MAX_LOOPS}, not "
            f"{value!r} (each loop is a process of its own; for more, run the command on "
            "more hosts)"
        )
    return count


def run_loops(concurrency: int, options: dict[str, Any], logger: logging.Logger) -> None:
    """Supervise ``concurrency`` loops (delayqueue/worker/fleet.py), each this command with
    the same options in a child process. Metrics: the loops count into a directory of
    their own (Prometheus multiprocess mode), which this process serves with the gauges.
    Health file: each loop touches a file of its own; this process gives the user's file
    the oldest of their times."""
    settings_module = settings.SETTINGS_MODULE
    if not settings_module:
        raise CommandError(
            "--concurrency needs a settings module (DJANGO_SETTINGS_MODULE or --settings): "
            "each loop is this command run again in a process of its own"
        )
    port, health = options["metrics_port"], options["health_file"]
    env = loop_environment()
    workdir = Path(tempfile.mkdtemp(prefix="delayqueue-loops-")) if port or health else None
    server: WSGIServer | None = None
    try:
        if workdir is not None and port is not None:
            metrics = workdir / "metrics"
            metrics.mkdir()
            shared = [env.pop(name, None) for name in (MULTIPROC, MULTIPROC.lower())]
            if any(shared):
                logger.info(
                    "%s is set: the loops count into a directory of their own instead, "
                    "served on --metrics-port (so they are not counted twice)",
                    MULTIPROC,
                )
            env[MULTIPROC] = str(metrics)
            server = serve_loop_metrics(port, options["metrics_address"], metrics, logger)
        health_of = None
        if workdir is not None and health:
            (workdir / "health").mkdir()
            health_of = functools.partial(loop_health_file, workdir / "health")
        argv = functools.partial(loop_argv, options, settings_module, health_of)

        connections.close_all()  # the supervisor never touches the database
        code = Fleet(
            concurrency,
            argv,
            env=env,
            once=options["once"],
            health_file=Path(health) if health else None,
            health_of=health_of,
        ).run()
    finally:
        if server is not None:
            server.shutdown()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    if code:
        raise CommandError(f"delay worker loops exited with code {code} (see the log above)")


def loop_health_file(directory: Path, index: int) -> Path:
    return directory / f"loop-{index}"


def loop_argv(
    options: dict[str, Any],
    settings_module: str,
    health_of: Callable[[int], Path] | None,
    index: int,
) -> list[str]:
    """The command line of loop ``index``: this command, with these options, in one loop."""
    argv = [sys.executable, "-m", "django", "run_delay_worker", "--settings", settings_module,
            "--skip-checks", "-v", str(options["verbosity"]),
            "--loop-index", str(index), "--loop-of", str(os.getpid())]  # fmt: skip
    if options["queues"]:
        argv += ["--queues", options["queues"]]
    if options["claim_size"] is not None:
        argv += ["--claim-size", str(options["claim_size"])]
    if options["visibility_timeout"] is not None:
        argv += ["--visibility-timeout", repr(float(options["visibility_timeout"]))]
    if health_of is not None:
        argv += ["--health-file", str(health_of(index))]
    flags = {"--once": "once", "--traceback": "traceback", "--no-color": "no_color",
             "--force-color": "force_color"}  # fmt: skip
    argv += [flag for flag, name in flags.items() if options.get(name)]
    return argv


def serve_metrics(port: int, address: str, logger: logging.Logger) -> None:
    """Serve /metrics from a thread of this process: its own counters and histograms (not
    the sum of a multiprocess directory: the Django view serves that) and the gauges."""
    from delayqueue.observability.metrics import (  # connects the receivers
        multiprocess_dir,
        registry,
    )

    if multiprocess_dir():
        logger.warning(
            "PROMETHEUS_MULTIPROC_DIR is set: this worker's counters are also written there, "
            "so a view serving that directory counts them too; scrape one of the two, or run "
            "the delay worker without PROMETHEUS_MULTIPROC_DIR (docs/operations.md)"
        )
    start_metrics_server(port, address, registry(multiprocess=False), logger)


def serve_loop_metrics(
    port: int, address: str, directory: Path, logger: logging.Logger
) -> WSGIServer:
    """Serve /metrics for the loops: the sum of the counters and histograms they write into
    ``directory`` (a loop that died still counts: totals never go down), and the gauges."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    from delayqueue.observability.metrics import QueueCollector

    served = CollectorRegistry()
    MultiProcessCollector(served, str(directory))
    served.register(QueueCollector())
    return start_metrics_server(port, address, served, logger)


def start_metrics_server(
    port: int, address: str, registry: Collector, logger: logging.Logger
) -> WSGIServer:
    from prometheus_client import start_http_server

    try:
        server, _ = start_http_server(port, address, registry=registry)
    except OSError as exc:
        raise CommandError(
            f"cannot serve metrics on {address}:{port}: {exc} (is the port taken? "
            "choose another with --metrics-port)"
        ) from exc
    logger.info("serving Prometheus metrics on http://%s:%s/metrics", address, port)
    return server
