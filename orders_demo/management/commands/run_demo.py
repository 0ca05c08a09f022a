"""Run the whole demo from one terminal: Redis, web server, Celery worker and delay worker."""

import contextlib
import errno
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Q
from redis.connection import parse_url

from delayqueue.conf import get_settings
from delayqueue.redaction import redact_url
from orders_demo.models import Product
from orders_demo.templatetags.order_tags import format_duration

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}
DEMO_PRODUCTS = [
    ("Mechanical keyboard", Decimal("89.00"), 10),
    ("USB-C cable", Decimal("9.90"), 50),
]
REDIS_START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
POLL_INTERVAL = 0.2


@dataclass
class Child:
    """A process started by ``run_demo``."""

    name: str
    description: str
    process: subprocess.Popen[bytes]

    def is_running(self) -> bool:
        return self.process.poll() is None


def redis_answers(url: str) -> bool:
    """Whether a Redis server at ``url`` answers PING."""
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1) as client:
            return bool(client.ping())
    except redis.RedisError:
        return False


def redis_db(url: str) -> int:
    """The database number a Redis URL selects (0 when it names none)."""
    try:
        return int(parse_url(url).get("db") or 0)
    except ValueError:
        return 0


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on ``host:port`` (what runserver would bind)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As runserver does: a port in TIME_WAIT is free, one with a listener is not.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def shown_python() -> str:
    """How to call this Python from the current directory: ``.venv/bin/python`` in the
    README's setup, else ``python``."""
    try:
        relative = Path(sys.executable).relative_to(Path.cwd())
    except ValueError:
        return "python"
    return str(relative)


def start_child(name: str, description: str, args: list[str], cwd: Path) -> Child:
    """Start ``args`` in its own process group, so a Ctrl-C reaches only this command."""
    process = subprocess.Popen(args, cwd=cwd, process_group=0)
    return Child(name, description, process)


def stop_children(children: list[Child], timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM every child still running, wait up to ``timeout`` in total, then SIGKILL."""
    for child in children:
        if child.is_running():
            child.process.terminate()
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            child.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


@contextlib.contextmanager
def stop_on_signals(stop_requested: threading.Event) -> Iterator[None]:
    """Turn SIGINT and SIGTERM into ``stop_requested.set()`` while inside the block."""

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def wait_for_stop_or_death(children: list[Child], stop_requested: threading.Event) -> Child | None:
    """Block until a stop is requested (return None) or a child exits (return it)."""
    while not stop_requested.wait(POLL_INTERVAL):
        for child in children:
            if not child.is_running():
                return child
    return None


class Command(BaseCommand):
    help = (
        "Run the delayqueue demo: make sure Redis is up, migrate, seed products, then run the "
        "web server, a Celery worker and the delay worker until Ctrl-C."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port", type=int, default=8000, help="Port of the web server (default 8000)."
        )
        parser.add_argument(
            "--no-redis",
            action="store_true",
            help="Never start redis-server; expect Redis to be running at REDIS_URL.",
        )
        parser.add_argument(
            "--asgi",
            action="store_true",
            help="Serve the shop with uvicorn (orders_demo/asgi.py) instead of runserver.",
        )

    def handle(self, *args: Any, port: int, no_redis: bool, asgi: bool, **options: Any) -> None:
        base_dir = Path(settings.BASE_DIR)
        self.check_port(port)
        stop_requested = threading.Event()
        with contextlib.ExitStack() as cleanup:
            cleanup.enter_context(stop_on_signals(stop_requested))
            redis_child = self.ensure_redis(
                settings.REDIS_URL, may_start=not no_redis, cleanup=cleanup
            )
            self.prepare_database()
            if stop_requested.is_set():
                return
            self.check_port(port)  # again: the database steps may have taken a while
            children = self.start_demo_processes(base_dir, port, asgi)
            cleanup.callback(stop_children, children)
            self.print_banner(port, children, redis_child)
            watched = [*children, redis_child] if redis_child else children
            dead = wait_for_stop_or_death(watched, stop_requested)
            if dead is None:
                self.stdout.write("Stopping…")
        if dead is not None:
            hint = ""
            if dead.name == "web":
                hint = f" Is port {port} in use? Choose another with --port {port + 1}, say."
            raise CommandError(
                f"{dead.name} ({dead.description}) exited unexpectedly with code "
                f"{dead.process.returncode}; stopped the other processes.{hint}"
            )

    def check_port(self, port: int) -> None:
        """Refuse a port the web server could not listen on, before starting anything."""
        if not 1 <= port <= 65535:
            raise CommandError(f"--port {port}: give a port between 1 and 65535.")
        if port_in_use(port):
            suggestion = 8001 if port == 8000 else port + 1
            raise CommandError(
                f"Port {port} on 127.0.0.1 is already in use (another run_demo or runserver?). "
                f"Stop that, or choose another port with --port, e.g. "
                f"`{shown_python()} manage.py run_demo --port {suggestion}`."
            )

    def redis_description(self, url: str) -> str:
        """Which Redis database and keys the demo uses, e.g. ``redis://127.0.0.1:6379/5
        (database 5; delayqueue's keys dq:*, Celery's queues in database 5)``."""
        broker = str(settings.CELERY_BROKER_URL)
        celery_part = (
            f"Celery's queues in database {redis_db(url)}"
            if broker == url
            else f"Celery's broker at {redact_url(broker)}"
        )
        return (
            f"{redact_url(url)} (database {redis_db(url)}; delayqueue's keys "
            f"{get_settings().key_prefix}:*, {celery_part})"
        )

    def ensure_redis(
        self, url: str, *, may_start: bool, cleanup: contextlib.ExitStack
    ) -> Child | None:
        """Return the redis-server started for the demo, or None if Redis was already up."""
        if redis_answers(url):
            self.stdout.write(
                f"Using the Redis already running at {self.redis_description(url)}. "
                "run_demo never flushes it: the demo's keys stay there after it stops. "
                "Set REDIS_URL to use another database or server."
            )
            return None
        parts = urlsplit(url)
        if not may_start:
            raise CommandError(
                f"Redis is not reachable at {redact_url(url)}. "
                "Start it, or drop --no-redis to let run_demo start one."
            )
        if parts.hostname not in LOCAL_HOSTS:
            raise CommandError(
                f"Redis is not reachable at {redact_url(url)}. "
                "run_demo only starts a Redis on this machine; "
                "start yours or point REDIS_URL at one that runs."
            )
        server = shutil.which("redis-server")
        if server is None:
            raise CommandError(
                f"Redis is not reachable at {redact_url(url)} and redis-server is not installed. "
                "Install it (`sudo apt-get install redis-server`, or `brew install redis`), "
                "or point REDIS_URL at a running Redis."
            )
        port = parts.port or 6379
        data_dir = cleanup.enter_context(tempfile.TemporaryDirectory(prefix="delayqueue-demo-"))
        args = [server, "--port", str(port), "--save", "", "--appendonly", "no"]
        args += ["--bind", "127.0.0.1", "--dir", data_dir, "--loglevel", "warning"]
        child = start_child(
            "redis", f"redis-server on port {port}, nothing saved", args, Path(data_dir)
        )
        cleanup.callback(stop_children, [child])
        self.wait_until_redis_answers(url, child)
        self.stdout.write(
            f"Started redis-server on port {port} for the demo (nothing saved; it stops with "
            f"the demo): {self.redis_description(url)}."
        )
        return child

    def wait_until_redis_answers(self, url: str, child: Child) -> None:
        deadline = time.monotonic() + REDIS_START_TIMEOUT
        while not redis_answers(url):
            if not child.is_running():
                raise CommandError(
                    f"redis-server exited with code {child.process.returncode} before answering; "
                    f"is something else using the port of {redact_url(url)}?"
                )
            if time.monotonic() > deadline:
                raise CommandError(
                    f"redis-server did not answer PING at {redact_url(url)} "
                    f"within {REDIS_START_TIMEOUT:.0f} s."
                )
            time.sleep(POLL_INTERVAL)

    def prepare_database(self) -> None:
        """Migrate, add the demo products and a demo superuser."""
        call_command("migrate", interactive=False, verbosity=0)
        for name, price, stock in DEMO_PRODUCTS:
            Product.objects.get_or_create(name=name, defaults={"price": price, "stock": stock})
        user_model = get_user_model()
        if not user_model.objects.filter(Q(is_superuser=True) | Q(username="admin")).exists():
            user_model.objects.create_superuser("admin", "admin@example.com", "admin")
            self.stdout.write(
                "Created the superuser admin / admin. It is for this demo only: "
                "never use it on a server anyone else can reach."
            )

    def start_demo_processes(self, base_dir: Path, port: int, asgi: bool) -> list[Child]:
        manage_py = str(base_dir / "manage.py")
        python = sys.executable
        if asgi:
            web = start_child(
                "web",
                f"uvicorn (ASGI) on 127.0.0.1:{port}",
                [python, "-m", "uvicorn", "orders_demo.asgi:application",
                 "--host", "127.0.0.1", "--port", str(port)],
                base_dir,
            )  # fmt: skip
        else:
            web = start_child(
                "web",
                f"Django runserver on 127.0.0.1:{port}",
                [python, manage_py, "runserver", f"127.0.0.1:{port}", "--noreload"],
                base_dir,
            )
        return [
            web,
            start_child(
                "celery",
                "Celery worker, runs close_unpaid_order",
                [python, "-m", "celery", "-A", "orders_demo", "worker", "-l", "info", "-c", "2"],
                base_dir,
            ),
            start_child(
                "delay worker",
                "delayqueue worker, hands due jobs to Celery",
                [python, manage_py, "run_delay_worker", "--queues", "orders"],
                base_dir,
            ),
        ]

    def print_banner(self, port: int, children: list[Child], redis_child: Child | None) -> None:
        url = f"http://127.0.0.1:{port}/"
        lines = [
            "",
            "delayqueue demo",
            f"  Shop:   {url}",
            f"  Admin:  {url}admin/",
            f"  Redis:  {self.redis_description(str(settings.REDIS_URL))}, "
            + ("started for the demo" if redis_child else "already running, not flushed"),
            "  Processes:",
        ]
        for child in [*children, redis_child] if redis_child else children:
            lines.append(f"    {child.name:<13} {child.description}")
        timeout = settings.ORDER_PAYMENT_TIMEOUT
        port_option = "" if port == 8000 else f" --port {port}"
        lines += [
            f"  Unpaid orders close after {format_duration(timeout)} (to watch one close, try "
            f"ORDER_PAYMENT_TIMEOUT=20 {shown_python()} manage.py run_demo{port_option}).",
            "Ctrl-C stops everything.",
            "",
        ]
        self.stdout.write("\n".join(lines), self.style.SUCCESS)
