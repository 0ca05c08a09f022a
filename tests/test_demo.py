"""The README's demo command, run as a user would: `manage.py run_demo` on a fresh database
and a Redis it starts itself; an order placed over HTTP is closed when its time is up."""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import redis

from tests.conftest import wait_for
from tests.processes import ROOT
from tests.redis_server import free_port


def test_run_demo_closes_an_unpaid_order_and_stops_cleanly(tmp_path: Path) -> None:
    web_port, redis_port = free_port(), free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DQ_TEST_", "CELERY_", "DJANGO_SETTINGS"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="orders_demo.settings",
        REDIS_URL=f"redis://127.0.0.1:{redis_port}/0",  # nothing there: run_demo starts it
        DATABASE_URL=f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        ORDER_PAYMENT_TIMEOUT="1",
    )
    log = (tmp_path / "demo.log").open("wb")
    demo = subprocess.Popen(
        [sys.executable, "manage.py", "run_demo", "--port", str(web_port)],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
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
        request = urllib.request.Request(
            base + "/orders/new/", data=urllib.parse.urlencode(form).encode(), method="POST"
        )
        with opener.open(request, timeout=10) as response:
            assert response.status == 200  # after the redirect to the order list
        wait_for(lambda: "Closed" in page("/orders/"), 30, 0.25)
        assert redis.Redis(port=redis_port).ping()
    finally:
        demo.send_signal(signal.SIGINT)  # what Ctrl-C sends
        code = demo.wait(30)
        log.close()
    output = (tmp_path / "demo.log").read_text(errors="replace")
    assert code == 0, output
    assert "Shop:" in output
    try:
        redis.Redis(port=redis_port, socket_connect_timeout=1).ping()
        raise AssertionError("run_demo left its redis-server running")
    except redis.ConnectionError:
        pass
