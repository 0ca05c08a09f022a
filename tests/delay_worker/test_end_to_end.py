"""End to end: real delay workers hand jobs to a real Celery worker."""

from __future__ import annotations

import os
import signal
import socket
import time
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.test import Client, override_settings

import delayqueue
from delayqueue.engine.keys import queue_keys
from orders_demo.models import Order, Product
from tests.support import jobs
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_job_runs_through_celery_and_is_acked(celery_worker, delay_worker, r):
    delay_worker("--queues", "tests")
    job = jobs.record.delay_for("hello", seconds=0.3)
    runs = wait_for(lambda: jobs.ran("record"))
    assert runs[0]["tag"] == "hello"
    wait_for(
        lambda: (
            r.zcard(queue_keys("tests").inflight) == 0
            and not r.exists(queue_keys("tests").job(job.id))
        )
    )


def test_jobs_are_handed_over_ahead_and_start_no_earlier_than_their_due_time(
    celery_worker, delay_worker, r
):
    """DISPATCH_AHEAD (0.05 s by default): the delay worker claims and dispatches a job
    before its due time, and the Celery side (one job per message, or a batch) holds it
    until then."""
    worker = delay_worker("--queues", "tests")
    start = time.time() + 1.5
    due: dict[str, float] = {}
    for i in range(6):
        for task, tag in ((jobs.record, f"single-{i}"), (jobs.batched, f"batch-{i}")):
            job = task.delay_until(tag, eta=datetime.fromtimestamp(start + i * 0.03, UTC))
            assert job.due_at is not None
            due[tag] = job.due_at.timestamp()
    wait_for(lambda: len(jobs.ran()) >= 12, 20)
    started = {str(run["tag"]): float(run["at"]) for run in jobs.ran()}  # type: ignore[arg-type]
    assert sorted(started) == sorted(due)
    # (due_at is the due time to the ms that Redis holds; the run's clock is the same host's)
    early = {tag: due[tag] - at for tag, at in started.items() if at < due[tag] - 0.001}
    assert early == {}, f"started before their due time (s): {early}"
    # and they were handed over before it (a pass waking at the due time would say "after")
    assert "ahead of its due time" in worker.output()


def test_plain_celery_task_and_immediate_delay(celery_worker, delay_worker, r):
    delay_worker("--queues", "misc")
    delayqueue.enqueue("tests.support.jobs.plain", ["later"], delay=0.2, queue="misc")
    jobs.record.delay("now")  # .delay() is still plain Celery: runs at once, no job
    wait_for(lambda: jobs.ran("plain") and jobs.ran("record"))
    assert jobs.ran("plain")[0]["tag"] == "later" and jobs.ran("record")[0]["tag"] == "now"
    wait_for(lambda: r.zcard(queue_keys("misc").inflight) == 0)
    assert r.zcard(queue_keys("misc").scheduled) == 0


def place_order(client: Client, product: Product, quantity: int = 2) -> Order:
    response = client.post("/orders/new/", {"product_id": product.pk, "quantity": quantity})
    assert response.status_code == 302
    return Order.objects.latest("pk")


@override_settings(ORDER_PAYMENT_TIMEOUT=1)
def test_unpaid_order_is_closed_and_stock_returned(celery_worker, delay_worker, r):
    delay_worker("--queues", "orders")
    product = Product.objects.create(name="Keyboard", price=Decimal("50.00"), stock=10)
    client = Client()
    unpaid = place_order(client, product, 2)
    paid = place_order(client, product, 3)
    assert Product.objects.get(pk=product.pk).stock == 5
    assert client.post(f"/orders/{paid.pk}/pay/").status_code == 302
    assert (
        r.hget(queue_keys("orders").dedupe, f"close-order:{paid.pk}") is None
    )  # its job was cancelled

    wait_for(lambda: Order.objects.get(pk=unpaid.pk).status == Order.Status.CLOSED, 20)
    assert Product.objects.get(pk=product.pk).stock == 7  # 2 back, the paid 3 stay sold
    assert Order.objects.get(pk=paid.pk).status == Order.Status.PAID
    wait_for(lambda: r.zcard(queue_keys("orders").inflight) == 0)
    assert r.zcard(queue_keys("orders").scheduled) == 0 and r.zcard(queue_keys("orders").dead) == 0


def test_failing_task_retries_then_lands_in_dead_with_traceback(celery_worker, delay_worker, r):
    delay_worker("--queues", "tests")
    job = jobs.always_fails.delay_for("f", seconds=0.1)
    wait_for(lambda: r.zscore(queue_keys("tests").dead, job.id) is not None, 20)
    assert [run["tag"] for run in jobs.ran("fail")] == ["f", "f", "f"]  # max_attempts=3
    data = r.hgetall(queue_keys("tests").job(job.id))
    assert data["err"] == "ValueError: boom f"
    assert "Traceback" in data["tb"] and "raise ValueError" in data["tb"]
    assert data["why"] == "failed 3 of 3 attempts" and data["att"] == "3"


class BlackHole:
    """A TCP port that accepts connections and never answers: a broker that hangs."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(100)
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/1"

    def close(self) -> None:
        self.sock.close()


def test_delay_worker_killed_after_claiming_loses_nothing(celery_worker, delay_worker, r):
    hole = BlackHole()
    try:
        os.environ["DQ_TEST_BROKER_URL"] = hole.url
        doomed = delay_worker("--queues", "tests", "--visibility-timeout", "2")
    finally:
        del os.environ["DQ_TEST_BROKER_URL"]
    job = jobs.record.delay_for("survivor", seconds=0.1)
    # The worker claimed the job and hangs publishing it; now it dies.
    wait_for(lambda: r.zscore(queue_keys("tests").inflight, job.id) is not None)
    doomed.stop(signal.SIGKILL)
    hole.close()
    assert r.hget(queue_keys("tests").job(job.id), "att") == "1"

    delay_worker("--queues", "tests")
    runs = wait_for(lambda: jobs.ran("record"), 20)
    assert [run["tag"] for run in runs] == ["survivor"]
    wait_for(lambda: not r.exists(queue_keys("tests").job(job.id)))  # acked after its 2nd attempt


def test_two_delay_workers_run_every_job_once(celery_worker, delay_worker, r):
    delay_worker("--queues", "tests", "--claim-size", "20")
    delay_worker("--queues", "tests", "--claim-size", "20")
    count = 300
    specs = [delayqueue.spec(jobs.record, [f"j{i}"], delay=0.5 + i / count) for i in range(count)]
    delayqueue.delay_many(specs)
    wait_for(lambda: len(jobs.ran("record")) >= count, 60)
    wait_for(lambda: r.zcard(queue_keys("tests").inflight) == 0)
    tags = sorted(str(run["tag"]) for run in jobs.ran("record"))
    assert tags == sorted(f"j{i}" for i in range(count))  # each exactly once
    assert r.zcard(queue_keys("tests").scheduled) == 0


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_delay_worker_stops_warm_on_a_signal(delay_worker, sig):
    worker = delay_worker("--queues", "tests")
    worker.popen.send_signal(sig)
    assert worker.popen.wait(10) == 0
    assert "stopped after" in worker.output()


def test_second_signal_exits_at_once(delay_worker):
    worker = delay_worker("--queues", "tests")
    worker.popen.send_signal(signal.SIGSTOP)  # both signals are pending when it resumes
    worker.popen.send_signal(signal.SIGTERM)
    worker.popen.send_signal(signal.SIGINT)
    worker.popen.send_signal(signal.SIGCONT)
    assert worker.popen.wait(10) == 1  # cold stop: no "finish the batch"
    assert "second signal" in worker.output()


def test_delay_workers_pinned_to_shards_and_one_on_all_run_every_job_once(
    celery_worker, delay_worker, r
):
    """A sharded queue (tests.support.jobs.sharded: 4 shards, on a cluster spread over its masters)
    served by two workers pinned to two shards each and one on the whole queue: every job
    runs, once."""
    delay_worker("--queues", "sharded~0,sharded~1")
    delay_worker("--queues", "sharded~2,sharded~3")
    delay_worker("--queues", "sharded")
    made = jobs.sharded.delay_many([(f"s{i}",) for i in range(120)], seconds=0.5)
    assert {job.queue for job in made} == {f"sharded~{i}" for i in range(4)}
    wait_for(lambda: len(jobs.ran("sharded")) >= 120, timeout=60)
    tags = [str(run["tag"]) for run in jobs.ran("sharded")]
    assert sorted(tags) == sorted(f"s{i}" for i in range(120))  # each once
    wait_for(lambda: all(r.zcard(queue_keys(f"sharded~{i}").inflight) == 0 for i in range(4)))
