"""The async API under a real ASGI server: uvicorn serving the demo's ASGI application
(``orders_demo/asgi.py``, with the suite's probe views: tests/support/asgi_probe.py) to 50
concurrent clients, a real delay worker and Celery worker running what they schedule."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
import redis
from redis.cluster import RedisCluster

from delayqueue.engine.keys import queue_keys
from orders_demo.models import Order, Product
from tests.support import jobs
from tests.support.processes import Process, child_env
from tests.support.redis_server import free_port
from tests.support.waiting import wait_for

CLIENTS = 50
STARTS_WITHIN = 120  # seconds for uvicorn to answer: importing Django and the app on a busy machine
HELD_FOR = 30  # seconds a paused Redis holds the calls at most, waiting for a ping
Q = queue_keys("tests")


async def http(port: int, method: str, target: str, **headers: str) -> tuple[int, bytes, str]:
    """One HTTP/1.1 request on a connection of its own: (status, body, raw head)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    lines.append("Content-Length: 0")
    try:
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        data = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body, head.decode("latin-1")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[int, Process]]:
    """uvicorn on a free port, ResourceWarnings shown in its log."""
    port = free_port()
    command = [
        sys.executable, "-W", "always::ResourceWarning", "-m", "uvicorn",
        "tests.support.asgi_probe:application", "--host", "127.0.0.1", "--port", str(port),
        "--lifespan", "off", "--log-level", "warning",
    ]  # fmt: skip
    process = Process("uvicorn", command, tmp_path / "uvicorn.log", child_env())

    def answers() -> bool:
        if not process.alive():
            return True
        try:
            return asyncio.run(http(port, "GET", "/probe/ping"))[0] == 200
        except OSError:
            return False

    try:
        wait_for(answers, STARTS_WITHIN)
        assert process.alive(), process.output()
        yield port, process
    finally:
        process.stop()
    said = process.log.read_text(errors="replace")
    assert not re.search(r"ResourceWarning|[Uu]nclosed|Traceback", said), said


def _pausers(r: redis.Redis) -> list[redis.Redis]:
    """Clients of each server holding delayqueue's data (every primary of a cluster)."""
    if isinstance(r, RedisCluster):
        return [redis.Redis(host=n.host, port=n.port) for n in r.get_primaries()]
    return [redis.Redis.from_url(os.environ["REDIS_URL"])]


def test_under_concurrent_clients_every_job_runs_once_none_early_and_cancelled_never(
    celery_worker: Process, delay_worker: Any, server: tuple[int, Process], r: redis.Redis
) -> None:
    port, _ = server
    delay_worker("--queues", "tests")

    async def client(i: int) -> list[dict[str, Any]]:
        made = []
        for n in range(4):
            ms = 60_000 if n == 0 else 1_000 + 100 * n  # the first is cancelled long before due
            status, body, _ = await http(port, "POST", f"/probe/schedule?tag=c{i}-{n}&ms={ms}")
            assert status == 200, body
            made.append({**json.loads(body), "tag": f"c{i}-{n}"})
        status, body, _ = await http(port, "POST", f"/probe/cancel?id={made[0]['id']}")
        assert status == 200 and json.loads(body) == {"cancelled": True}, (body, made[0], _state())
        return made

    async def clients() -> list[list[dict[str, Any]]]:
        return await asyncio.gather(*(client(i) for i in range(CLIENTS)))

    def _state() -> Any:
        return time.time(), r.zcard(Q.scheduled), r.lrange(jobs.RAN, 0, 3)

    made = [job for jobs_of_one in asyncio.run(clients()) for job in jobs_of_one]
    cancelled = {job["tag"] for job in made if job["tag"].endswith("-0")}
    due = {job["tag"]: job["due_ms"] for job in made if job["tag"] not in cancelled}
    assert len(due) == 3 * CLIENTS and len(cancelled) == CLIENTS

    def ran() -> list[dict[str, Any]]:
        return [json.loads(item) for item in r.lrange(jobs.RAN, 0, -1)]

    wait_for(lambda: len(ran()) >= len(due), 90)
    # nothing left to run: the cancelled jobs are gone, not merely not yet due
    wait_for(lambda: r.zcard(Q.scheduled) + r.zcard(Q.inflight) == 0, 30)
    runs = ran()
    tags = [run["tag"] for run in runs]
    assert sorted(tags) == sorted(due)  # each once, and no cancelled one
    early = [run for run in runs if run["at"] * 1000 < due[run["tag"]]]
    assert early == []


def test_while_redis_is_paused_the_server_keeps_serving(
    server: tuple[int, Process], r: redis.Redis
) -> None:
    """50 clients' schedule calls, the server's first use of Redis (its clients, connection
    and scripts), wait on a Redis that holds every write until the test lets it go; meanwhile
    the same server answers pings, until one sees all 50 calls waiting at once. No clock is
    raced: Redis holds the calls however long the server takes to start them (50 requests
    through Django's middleware threads take a while on a busy machine). A loop blocked by a
    call waiting on Redis answers no ping: the test fails after HELD_FOR seconds."""
    port, _ = server
    pausers = _pausers(r)

    async def pings_until_all_wait(seen: list[int]) -> None:
        while not seen or seen[-1] < CLIENTS:
            status, body, _ = await http(port, "GET", "/probe/ping")
            assert status == 200
            seen.append(json.loads(body)["waiting"])
            await asyncio.sleep(0.01)

    async def main() -> tuple[list[int], bool, list[int]]:
        for pauser in pausers:  # until UNPAUSE below (the timeout is a safety net)
            pauser.execute_command("CLIENT", "PAUSE", 2 * HELD_FOR * 1000, "WRITE")
        try:
            calls = [
                asyncio.ensure_future(http(port, "POST", f"/probe/schedule?tag=p{i}&ms=60000"))
                for i in range(CLIENTS)
            ]
            seen: list[int] = []
            with contextlib.suppress(TimeoutError):  # (the assertions say what was seen)
                await asyncio.wait_for(pings_until_all_wait(seen), HELD_FOR)
            held = not any(call.done() for call in calls)
        finally:
            for pauser in pausers:
                pauser.execute_command("CLIENT", "UNPAUSE")
                pauser.close()
        return [(await call)[0] for call in calls], held, seen

    statuses, held, seen = asyncio.run(main())
    assert seen and seen[-1] == CLIENTS, seen  # a ping answered while all 50 waited
    assert held  # on Redis: none had its reply before UNPAUSE
    assert statuses == [200] * CLIENTS
    assert r.zcard(Q.scheduled) == CLIENTS


@pytest.mark.django_db(transaction=True)
def test_the_demos_async_views_place_and_pay_an_order(
    server: tuple[int, Process], r: redis.Redis
) -> None:
    port, _ = server
    product = Product.objects.create(name="async widget", price="3.00", stock=5)
    assert _post_form(port, "/async/orders/new/", {"product_id": product.pk, "quantity": 2}) == 302
    order = Order.objects.get(product=product)
    product.refresh_from_db()
    assert product.stock == 3 and order.status == Order.Status.PENDING
    orders = queue_keys("orders")
    assert order.close_job_id and r.zscore(orders.scheduled, order.close_job_id) is not None
    assert _post_form(port, f"/async/orders/{order.pk}/pay/", {}) == 302
    order.refresh_from_db()
    assert order.status == Order.Status.PAID
    assert r.zscore(orders.scheduled, order.close_job_id) is None  # cancelled by acancel


def _post_form(port: int, target: str, fields: dict[str, Any]) -> int:
    """POST a form with Django's CSRF cookie and token, as a browser does; the status."""

    async def main() -> int:
        _, _, head = await http(port, "GET", "/")
        token = re.search(r"csrftoken=([^;]+)", head)
        assert token is not None, head
        body = urlencode({**fields, "csrfmiddlewaretoken": token.group(1)}).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = (
            f"POST {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Cookie: csrftoken={token.group(1)}\r\n"
            "Content-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        writer.write(request + body)
        await writer.drain()
        data = await reader.read()
        writer.close()
        await writer.wait_closed()
        return int(data.split()[1])

    return asyncio.run(main())
