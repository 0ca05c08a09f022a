"""The README's demo command, run as a user would: `manage.py run_demo` on a fresh database
and a Redis it starts itself; an order placed over HTTP is closed when its time is up. Also:
what run_demo says about the Redis it uses and a port in use, the order list's account of each
close job, and the suite's own cleanup when it is stopped by a signal."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.parse
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest
import redis
from django.test import Client
from django.urls import reverse
from django.utils import dateformat, timezone

import delayqueue
from delayqueue.engine.keys import queue_keys
from orders_demo.models import Order, Product
from orders_demo.views import close_job_key
from tests.support.processes import ROOT, Process, default_signals
from tests.support.redis_server import RedisServer, free_port
from tests.support.waiting import wait_for


def demo_env(tmp_path: Path, redis_url: str, **extra: str) -> dict[str, str]:
    """The environment of a user's shell: none of the suite's own settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DQ_TEST_", "CELERY_", "DJANGO_SETTINGS"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="orders_demo.settings",
        REDIS_URL=redis_url,
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        **extra,
    )
    return env


def start_demo(tmp_path: Path, env: dict[str, str], *options: str) -> subprocess.Popen[bytes]:
    with (tmp_path / "demo.log").open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "manage.py", "run_demo", *options],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=default_signals,  # (the tests stop it with Ctrl-C's SIGINT)
        )


def demo_output(tmp_path: Path) -> str:
    return (tmp_path / "demo.log").read_text(errors="replace")


def stop_demo(demo: subprocess.Popen[bytes]) -> int:
    if demo.poll() is None:
        demo.send_signal(signal.SIGINT)  # what Ctrl-C sends
    try:
        return demo.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(demo.pid, signal.SIGKILL)
        demo.wait()
        raise


@pytest.mark.parametrize(
    ("served_by", "place"),
    [("runserver", "/orders/new/"), ("asgi", "/async/orders/new/")],
    ids=["runserver", "uvicorn-async-view"],
)
def test_run_demo_closes_an_unpaid_order_and_stops_cleanly(
    tmp_path: Path, served_by: str, place: str
) -> None:
    web_port, redis_port = free_port(), free_port()
    # Nothing there: run_demo starts it.
    env = demo_env(tmp_path, f"redis://127.0.0.1:{redis_port}/5", ORDER_PAYMENT_TIMEOUT="1")
    asgi = ["--asgi"] if served_by == "asgi" else []
    demo = start_demo(tmp_path, env, "--port", str(web_port), *asgi)
    base = f"http://127.0.0.1:{web_port}"
    opener = urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )

    def page(path: str) -> str:
        try:
            with opener.open(base + path, timeout=5) as response:
                return str(response.read().decode())
        except OSError:
            return ""

    try:
        shop = wait_for(lambda: page("/"), 90, 0.25)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', shop)
        product = re.search(r'name="product_id" value="(\d+)"', shop)
        assert token and product, shop
        form = {"csrfmiddlewaretoken": token[1], "product_id": product[1], "quantity": "1"}
        assert "Order (async view)" in shop
        request = urllib.request.Request(
            base + place, data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        with opener.open(request, timeout=10) as response:
            assert response.status == 200  # after the redirect to the order list
        wait_for(lambda: "Closed" in page("/orders/"), 30, 0.25)
        demo_redis = redis.Redis(port=redis_port, db=5)
        assert demo_redis.ping()
        assert demo_redis.dbsize() > 0  # the demo's keys are in the database it named
        # its periodic report (DELAYQUEUE["SCHEDULES"]) was planned by its delay worker
        schedules = queue_keys("orders").schedules
        assert demo_redis.zscore(schedules, "overdue-orders-report") is not None
    finally:
        code = stop_demo(demo)
    output = demo_output(tmp_path)
    assert code == 0, output
    assert "Shop:" in output
    # the Django @task the order view enqueued with run_after (TASKS: delayqueue's backend)
    # ran (it reminds, or finds the order closed already when its worker started late)
    assert "path=orders_demo.tasks.send_payment_reminder state=SUCCESSFUL" in output, output
    assert ("uvicorn (ASGI) on" in output) == (served_by == "asgi"), output
    assert f"Started redis-server on port {redis_port} for the demo" in output
    assert f"redis://127.0.0.1:{redis_port}/5 (database 5; delayqueue's keys dq:*" in output
    # The banner's tip is the README's command (with the interpreter that runs it: the
    # README's .venv/bin/python, or a matrix row's under .nox/).
    python = Path(sys.executable).relative_to(ROOT)
    assert f"ORDER_PAYMENT_TIMEOUT=20 {python} manage.py run_demo --port {web_port}" in (
        " ".join(output.split())
    )
    try:
        redis.Redis(port=redis_port, socket_connect_timeout=1).ping()
        raise AssertionError("run_demo left its redis-server running")
    except redis.ConnectionError:
        pass


def test_run_demo_says_which_running_redis_it_uses_and_leaves_it_running(
    tmp_path: Path,
) -> None:
    server = RedisServer().start()
    try:
        env = demo_env(tmp_path, f"redis://127.0.0.1:{server.port}/7")
        demo = start_demo(tmp_path, env, "--port", str(free_port()), "--no-redis")
        try:
            wait_for(lambda: "Ctrl-C stops" in demo_output(tmp_path) or demo.poll(), 90, 0.25)
            wait_for(lambda: server.client(7).dbsize() > 0, 30, 0.25)  # the workers' keys
        finally:
            code = stop_demo(demo)
        output = " ".join(demo_output(tmp_path).split())
        assert code == 0, output
        said = (
            f"Using the Redis already running at redis://127.0.0.1:{server.port}/7 "
            "(database 7; delayqueue's keys dq:*, Celery's queues in database 7). "
            "run_demo never flushes it"
        )
        assert said in output
        assert "already running, not flushed" in output  # the banner says it again
        assert server.client().ping()  # not stopped: it is not the demo's
        assert server.client(0).dbsize() == 0
    finally:
        server.cleanup()


def test_run_demo_refuses_a_port_in_use_and_suggests_another(tmp_path: Path) -> None:
    redis_port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = demo_env(tmp_path, f"redis://127.0.0.1:{redis_port}/5")
        demo = start_demo(tmp_path, env, "--port", str(port))
        code = demo.wait(60)
    output = demo_output(tmp_path)
    assert code == 1, output
    assert f"Port {port} on 127.0.0.1 is already in use" in output
    assert f"--port {port + 1}" in output
    assert "Started redis-server" not in output  # refused before starting anything
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=redis_port, socket_connect_timeout=1).ping()


# ---- the order list tells what each close job does -------------------------------------


def place_order(client: Client) -> Order:
    product = Product.objects.create(name="Lamp", price=Decimal("20.00"), stock=5)
    response = client.post(reverse("place_order"), {"product_id": product.pk, "quantity": "1"})
    assert response.status_code == 302
    order = Order.objects.get()
    assert order.close_job_id
    return order


def close_job_cell(client: Client, order: Order) -> str:
    page = client.get(reverse("order_list")).content.decode()
    row = re.search(rf'<td class="num">{order.pk}</td>.*?</tr>', page, re.S)
    assert row, page
    return " ".join(row[0].split())


@pytest.mark.django_db(transaction=True)
def test_order_list_shows_the_close_job_and_stops_promising_a_close_once_cancelled() -> None:
    client = Client()
    order = place_order(client)
    job_url = reverse("admin:delayqueue_delayedjob_job", args=["orders", order.close_job_id])
    cell = close_job_cell(client, order)
    assert "closes the order at " in cell
    assert "in 29 min" in cell or "in 30 min" in cell
    assert f'href="{job_url}"' in cell

    assert delayqueue.cancel("orders", key=close_job_key(order.pk))
    cell = close_job_cell(client, order)
    assert "none: the close job was cancelled, so the order stays open until it is paid" in cell
    assert "closes the order" not in cell and "refresh to see" not in cell
    assert "time is up" not in client.get(reverse("order_list")).content.decode()


@pytest.mark.django_db(transaction=True)
def test_order_list_shows_a_rescheduled_close_job_and_links_to_its_admin_page(
    admin_client: Client,
) -> None:
    order = place_order(admin_client)
    job = delayqueue.reschedule("orders", key=close_job_key(order.pk), delay=2 * 3600)
    assert job is not None
    cell = close_job_cell(admin_client, order)
    due = dateformat.format(timezone.localtime(job.due_at), "H:i:s")
    assert f"closes the order at {due}" in cell and "in 1" in cell  # "in 119 min 59 s"
    job_url = reverse("admin:delayqueue_delayedjob_job", args=["orders", order.close_job_id])
    assert f'href="{job_url}"' in cell
    assert admin_client.get(job_url).status_code == 200

    delayqueue.reschedule("orders", key=close_job_key(order.pk), delay=0)  # run now
    cell = close_job_cell(admin_client, order)
    assert "due now: the delay worker hands it to Celery" in cell  # no worker in this test


# ---- the suite cleans up after itself, even when stopped by a signal ----------------------


TINY_TEST = """
import os
import pathlib
import time


def test_wait():
    seen = os.environ["DQ_TEST_REDIS_PORT"] + " " + os.environ["DQ_TEST_DIR"]
    pathlib.Path(os.environ["DQ_TINY_MARKER"]).write_text(seen)
    time.sleep(120)
"""


def process_gone(pid: int) -> bool:
    """Whether ``pid`` exited (a zombie nobody reaped yet counts as exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return "\nState:\tZ" in status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL], ids=str)
def test_stopped_test_run_leaves_no_redis_server_and_no_folder(
    tmp_path: Path, sig: signal.Signals
) -> None:
    tiny = tmp_path / "tiny" / "test_tiny.py"
    tiny.parent.mkdir()
    tiny.write_text(textwrap.dedent(TINY_TEST))
    temp_dir = tmp_path / "tmp"  # the run's temporary directory, to look for leftovers in
    temp_dir.mkdir()
    marker = tmp_path / "marker"
    env = {key: value for key, value in os.environ.items() if not key.startswith("DQ_TEST_")}
    env.update(TMPDIR=str(temp_dir), DQ_TINY_MARKER=str(marker))
    env.pop("DJANGO_SETTINGS_MODULE", None)  # as in a user's shell: pyproject.toml names it
    log = tmp_path / "pytest.log"
    with log.open("wb") as out:
        run = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"),
             "--rootdir", str(ROOT), "-p", "no:cacheprovider", "-q", str(tiny)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )  # fmt: skip
    try:
        wait_for(lambda: marker.exists() or run.poll() is not None, 60, 0.05)
        assert marker.exists(), log.read_text()
        port, test_dir = marker.read_text().split(" ", 1)
        assert Path(test_dir).parent == temp_dir
        server = redis.Redis(port=int(port), socket_connect_timeout=1)
        redis_pid = int(server.info("server")["process_id"])
        leftovers = sorted(p.name for p in temp_dir.glob("dq-*"))
        assert {name.split("-")[1] for name in leftovers} == {"test", "redis"}, leftovers
        run.send_signal(sig)
        code = run.wait(30)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    output = log.read_text(errors="replace")
    expected = {signal.SIGTERM: -signal.SIGTERM, signal.SIGINT: 2, signal.SIGKILL: -signal.SIGKILL}
    assert code == expected[sig], output
    # SIGKILL leaves no time to clean: the server dies with its parent all the same.
    wait_for(lambda: process_gone(redis_pid), 10, 0.05)
    with pytest.raises(redis.ConnectionError):
        server.ping()
    if sig != signal.SIGKILL:
        assert not list(temp_dir.glob("dq-*")), output


def test_children_hear_ctrl_c_when_the_test_run_was_started_with_it_ignored(
    tmp_path: Path,
) -> None:
    """A shell script's background job (``cmd &``) or nohup starts the test run with SIGINT
    ignored, which its children would inherit: the tests that stop a child with SIGINT start
    it with SIGINT's default disposition."""
    probe = "import signal, time; print(signal.getsignal(2), flush=True); time.sleep(30)"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        child = Process("probe", [sys.executable, "-c", probe], tmp_path / "probe.log", {})
    finally:
        signal.signal(signal.SIGINT, before)
    try:
        wait_for(lambda: child.output().strip(), 10)
        assert "default_int_handler" in child.output()
        assert child.stop(signal.SIGINT, timeout=10) == -signal.SIGINT  # not ignored
    finally:
        child.stop(signal.SIGKILL)
