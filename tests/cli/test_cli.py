"""``manage.py delayqueue``: run for real (call_command, and a child process for exit codes
and prompts) against the suite's Redis, with jobs really scheduled, in flight and dead."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO
from typing import Any

import pytest
import redis
from celery import Celery
from django.core.management import call_command
from django.core.management.base import CommandError

from delayqueue import enqueue
from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.producer.api import Job
from delayqueue.services import operations
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.command_line import cli
from tests.support.data_redis import only_on
from tests.support.processes import ROOT, Process, child_env
from tests.support.states import Q, schedule
from tests.support.waiting import wait_for

# ---- jobs in every state ----------------------------------------------------------------


def overdue(tag: str, seconds: float, queue: str = Q) -> Job:
    """A job whose due time passed ``seconds`` ago (nothing has claimed it)."""
    eta = datetime.now(UTC) - timedelta(seconds=seconds)
    return enqueue(jobs.record, [tag], eta=eta, queue=queue, on_commit=False)


def in_flight(parked: Celery, *tags: str) -> list[str]:
    """Jobs claimed and dispatched by a real delay worker pass (to a broker nobody reads)."""
    ids = [schedule(tag, seconds=0).id for tag in tags]
    claimed = DelayWorker([Q], celery_app=parked).run_pass().claimed
    assert sorted(c.id for c in claimed) == sorted(ids)
    return ids


def dead(parked: Celery, *tags: str) -> list[str]:
    """Jobs that failed their only attempt (claimed by the worker, then the fail script)."""
    ids = [schedule(tag, seconds=0, max_attempts=1).id for tag in tags]
    for claimed in DelayWorker([Q], celery_app=parked).run_pass().claimed:
        outcome = run(
            transitions.fail(
                queue_keys(Q),
                claimed.id,
                claimed.token,
                backoff_ms=0,
                error=f"ValueError: boom {claimed.id}",
                traceback="Traceback (most recent call last):\nValueError: boom",
                max_attempts=1,
                dead_max=1000,
            )
        )
        assert outcome == "dead"
    return ids


def state_of(r: redis.Redis, job_id: str, queue: str = Q) -> str | None:
    keys = queue_keys(queue)
    sets = {"scheduled": keys.scheduled, "inflight": keys.inflight, "dead": keys.dead}
    for state, zset in sets.items():
        if r.zscore(zset, job_id) is not None:
            return state
    return None


def beat(r: redis.Redis, worker_id: str, queues: list[str], age_s: float = 0) -> None:
    """A heartbeat as a live ``run_delay_worker`` writes it."""
    g = global_keys()
    seconds, micros = r.time()
    now_ms = int(seconds) * 1000 + int(micros) // 1000 - int(age_s * 1000)
    r.hset(
        g.worker(worker_id),
        mapping={
            "host": "h1",
            "pid": 4242,
            "queues": ",".join(queues),
            "dispatched": 7,
            "beat": now_ms,
        },
    )
    r.expire(g.worker(worker_id), 30)
    r.zadd(g.workers, {worker_id: now_ms})


# ---- running the command ----------------------------------------------------------------


def call(*args: str, stdin: Any = None) -> str:
    out = StringIO()
    call_command("delayqueue", *args, stdout=out, stdin=stdin)
    return out.getvalue()


def cli_on_tty(*args: str, answer: str) -> subprocess.CompletedProcess[str]:
    """The command with a terminal on stdin, answering its question with ``answer``."""
    main, child = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "delayqueue", *args],
            cwd=ROOT,
            env=child_env(),
            stdin=child,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        os.close(child)
        os.write(main, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(main)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


class FakeTerminal(StringIO):
    def isatty(self) -> bool:
        return True


# ---- status -----------------------------------------------------------------------------


def test_status_json_counts_times_rates_and_workers(r: redis.Redis, parked_celery: Celery) -> None:
    later = schedule("later", seconds=600)
    in_flight(parked_celery, "a", "b")
    dead(parked_celery, "d")
    late = overdue("late", 90)
    beat(r, "host1:4242:ABCDEF", [Q])
    operations.pause("other", "maintenance")
    schedule("elsewhere", queue="other")

    doc = json.loads(call("status", "--json"))

    by_name = {q["name"]: q for q in doc["queues"]}
    assert sorted(by_name) == ["other", Q]
    q = by_name[Q]
    assert (q["scheduled"], q["inflight"], q["dead"], q["paused"]) == (2, 2, 1, False)
    assert 89 <= q["oldest_overdue_seconds"] < 120
    assert late.due_at is not None
    assert q["next_due"] == late.due_at.astimezone(UTC).isoformat(timespec="milliseconds")
    # claims counted by the stats keys: 3 dispatched (2 in flight + the one that died), 1 dead
    assert q["rates_per_minute"]["last_minute"]["dispatched"] == 3
    assert q["rates_per_minute"]["last_minute"]["dead"] == 1
    assert q["rates_per_minute"]["last_hour"]["dispatched"] == pytest.approx(3 / 60, abs=0.01)
    assert q["workers"] == ["host1:4242:ABCDEF"]
    other = by_name["other"]
    assert (other["scheduled"], other["paused"], other["oldest_overdue_seconds"]) == (1, True, 0)
    assert other["workers"] == []
    [worker] = doc["workers"]
    assert worker["id"] == "host1:4242:ABCDEF"
    assert (worker["host"], worker["pid"], worker["queues"], worker["dispatched"]) == (
        "h1",
        4242,
        [Q],
        7,
    )
    assert 0 <= worker["last_beat_seconds"] < 5
    assert later.id  # scheduled in 10 minutes: counted, not overdue


def test_status_table_names_queues_counts_and_the_missing_worker(
    r: redis.Redis, parked_celery: Celery
) -> None:
    schedule("x")
    dead(parked_celery, "d1", "d2")
    out = call("status")
    row = next(line for line in out.splitlines() if f" {Q} " in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[:6] == [Q, "1", "0", "2", "no", "0"]
    assert "none: start manage.py run_delay_worker" in out

    beat(r, "w-1", [Q], age_s=12)
    out = call("status", "--queue", Q)
    assert "w-1" in out and "12 s ago" in out


def test_status_watch_refreshes_until_its_iterations(r: redis.Redis) -> None:
    job = schedule("w")
    done = cli("status", "--watch", "--json", "--interval", "0.2", "--iterations", "3")
    assert done.returncode == 0, done.stderr
    frames = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(frames) == 3
    assert all(f["queues"][0]["scheduled"] == 1 for f in frames)
    assert job.id


def test_status_watch_stops_quietly_on_ctrl_c(r: redis.Redis, tmp_path: Any) -> None:
    schedule("w")
    watcher = Process(
        "watch",
        [sys.executable, "manage.py", "delayqueue", "status", "--watch", "--interval", "0.2"],
        tmp_path / "watch.log",
        child_env(),
    )
    try:
        wait_for(lambda: watcher.output().count("delayqueue status at") >= 2, 30)
        code = watcher.stop(signal.SIGINT)
    finally:
        watcher.stop()
    assert code == 0
    shown = watcher.log.read_text()
    assert "Traceback" not in shown
    assert "Queues" in shown


# ---- show -------------------------------------------------------------------------------


def test_show_a_scheduled_job_and_a_dead_one(r: redis.Redis, parked_celery: Celery) -> None:
    job = enqueue(jobs.record, ["tag-1"], delay=600, queue=Q, key="order:7", on_commit=False)
    out = call("show", job.id)
    assert f"job       {job.id}" in out
    assert "state     scheduled" in out and "in 9 min" in out
    assert "task      tests.support.jobs.record" in out
    assert 'args      ["tag-1"]' in out
    assert "key       order:7" in out

    [dead_id] = dead(parked_celery, "d")
    shown = json.loads(call("show", dead_id, "--queue", Q, "--json"))
    assert shown["state"] == "dead"
    assert shown["args"] == ["d"]
    assert shown["error"] == f"ValueError: boom {dead_id}"
    assert shown["attempts"] == 1


def test_show_unknown_job_exits_1_and_malformed_id_exits_2(r: redis.Redis) -> None:
    schedule("x")
    missing = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    done = cli("show", missing)
    assert done.returncode == 1
    assert f"no job {missing} in any known queue" in done.stderr
    assert "Traceback" not in done.stderr

    done = cli("show", "not-a-job")
    assert done.returncode == 2
    assert "'not-a-job' is not a delayqueue job id" in done.stderr


# ---- cancel -----------------------------------------------------------------------------


def test_cancel_removes_a_scheduled_job(r: redis.Redis) -> None:
    job, kept = schedule("gone"), schedule("kept")
    out = call("cancel", job.id, "--yes")
    assert f"cancelled job {job.id} of queue {Q}" in out
    assert state_of(r, job.id) is None
    assert state_of(r, kept.id) == "scheduled"


def test_cancel_of_a_job_no_longer_scheduled_exits_1(r: redis.Redis, parked_celery: Celery) -> None:
    [running] = in_flight(parked_celery, "running")
    done = cli("cancel", running, "--yes")
    assert done.returncode == 1
    assert f"job {running} of queue {Q} is in flight, not scheduled" in done.stderr
    assert state_of(r, running) == "inflight"

    [gone] = dead(parked_celery, "dead")
    with pytest.raises(CommandError, match=f"purge-dead {Q} {gone}") as raised:
        call("cancel", gone, "--yes")
    assert raised.value.returncode == 1
    assert state_of(r, gone) == "dead"


def test_cancel_asks_on_a_terminal_and_refuses_without_one(r: redis.Redis) -> None:
    job = schedule("asked", key="k-asked")
    done = cli("cancel", job.id)  # stdin is not a terminal, no --yes
    assert done.returncode == 2
    assert "pass --yes" in done.stderr
    assert state_of(r, job.id) == "scheduled"

    done = cli_on_tty("cancel", job.id, answer="n")
    assert done.returncode == 1
    assert (
        f"Cancel job {job.id} (tests.support.jobs.record, key k-asked) of queue {Q}? [y/N]"
        in done.stderr
    )
    assert "nothing was changed" in done.stderr
    assert state_of(r, job.id) == "scheduled"

    done = cli_on_tty("cancel", job.id, answer="y")
    assert done.returncode == 0, done.stderr
    assert state_of(r, job.id) is None


# ---- dead jobs ----------------------------------------------------------------------------


def test_requeue_dead_puts_every_dead_job_back_with_fresh_attempts(
    r: redis.Redis, parked_celery: Celery
) -> None:
    ids = dead(parked_celery, "d1", "d2")
    with pytest.raises(CommandError, match="not confirmed") as raised:
        call("requeue-dead", Q, stdin=FakeTerminal("no\n"))
    assert raised.value.returncode == 1
    assert [state_of(r, i) for i in ids] == ["dead", "dead"]

    out = call("requeue-dead", Q, stdin=FakeTerminal("y\n"))
    assert f"requeued 2 dead jobs of queue {Q}" in out
    assert [state_of(r, i) for i in ids] == ["scheduled", "scheduled"]
    assert r.hget(queue_keys(Q).job(ids[0]), "att") == "0"

    assert "has no dead jobs; nothing to requeue" in call("requeue-dead", Q)


def test_requeue_dead_by_id_refuses_a_job_that_is_not_dead(
    r: redis.Redis, parked_celery: Celery
) -> None:
    [gone] = dead(parked_celery, "d")
    waiting = schedule("s")
    done = cli("requeue-dead", Q, gone, waiting.id, "--yes")
    assert done.returncode == 1
    assert f"requeued job {gone} of queue {Q}" in done.stdout
    assert f"job {waiting.id} of queue {Q} is scheduled, not dead" in done.stderr
    assert state_of(r, gone) == "scheduled"


def test_purge_dead_prompt_refusal_and_yes(r: redis.Redis, parked_celery: Celery) -> None:
    ids = dead(parked_celery, "d1", "d2", "d3")
    waiting = schedule("s")

    done = cli("purge-dead", Q)
    assert done.returncode == 2
    assert 'not confirmed: "Purge 3 dead jobs of queue tests?"' in done.stderr
    assert r.zcard(queue_keys(Q).dead) == 3

    done = cli_on_tty("purge-dead", Q, answer="")
    assert "Purge 3 dead jobs of queue tests? [y/N]" in done.stderr
    assert done.returncode == 1
    assert r.zcard(queue_keys(Q).dead) == 3

    done = cli("purge-dead", Q, "--yes")
    assert done.returncode == 0, done.stderr
    assert "purged 3 dead jobs of queue tests" in done.stdout
    assert r.zcard(queue_keys(Q).dead) == 0
    assert not any(r.exists(queue_keys(Q).job(i)) for i in ids)
    assert state_of(r, waiting.id) == "scheduled"


def test_purge_dead_by_id(r: redis.Redis, parked_celery: Celery) -> None:
    first, second = dead(parked_celery, "d1", "d2")
    out = call("purge-dead", Q, first, "--yes")
    assert f"purged job {first} of queue {Q}" in out
    assert (state_of(r, first), state_of(r, second)) == (None, "dead")


def test_bad_or_unknown_queue_names_exit_2(r: redis.Redis) -> None:
    schedule("x")
    done = cli("purge-dead", "no/slash", "--yes")
    assert done.returncode == 2
    assert "queue name 'no/slash' is not 1-64 characters" in done.stderr

    done = cli("pause", "ordres", "--yes")
    assert done.returncode == 2
    assert "unknown queue 'ordres' (known queues: tests)" in done.stderr
    assert not r.exists(queue_keys("ordres").paused)

    assert cli("frobnicate").returncode == 2
    assert cli("health", "--max-overdue", "-1").returncode == 2


# ---- pause, resume ----------------------------------------------------------------------


def test_pause_and_resume(r: redis.Redis) -> None:
    schedule("x")
    with pytest.raises(CommandError, match="pass --yes") as raised:
        call("pause", Q)
    assert raised.value.returncode == 2
    assert not operations.is_paused(Q)

    out = call("pause", Q, "--note", "deploy", "--yes")
    assert f"paused queue {Q}" in out
    assert r.get(queue_keys(Q).paused) == "deploy"
    assert f"queue {Q} is already paused" in call("pause", Q)  # no question, exit 0
    assert json.loads(call("status", "--json"))["queues"][0]["paused"] is True

    out = call("resume", Q, stdin=FakeTerminal("yes\n"))
    assert f"resumed queue {Q}" in out
    assert not operations.is_paused(Q)
    assert f"queue {Q} is not paused" in call("resume", Q)


# ---- health -----------------------------------------------------------------------------


def test_health_fails_with_an_overdue_job_and_no_worker(r: redis.Redis) -> None:
    overdue("late", 5)
    done = cli("health")
    assert done.returncode == 1
    assert (
        "UNHEALTHY tests: no live delay worker serves it (1 scheduled, 0 in flight)" in done.stdout
    )
    assert "unhealthy: no live delay worker" in done.stderr


def test_health_passes_with_a_live_delay_worker(
    r: redis.Redis, delay_worker: Callable[..., Process]
) -> None:
    overdue("late", 5)
    delay_worker("--queues", Q)
    wait_for(lambda: r.zcard(global_keys().workers), 15)
    done = cli("health")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok tests" in done.stdout and "healthy" in done.stdout


def test_health_fails_for_a_queue_no_worker_serves(
    r: redis.Redis, delay_worker: Callable[..., Process]
) -> None:
    schedule("x", queue="other")
    schedule("y")
    delay_worker("--queues", Q)
    wait_for(lambda: r.zcard(global_keys().workers), 15)
    done = cli("health", "--json")
    assert done.returncode == 1
    verdict = json.loads(done.stdout)
    assert {q["name"]: q["healthy"] for q in verdict["queues"]} == {"other": False, Q: True}


def test_health_max_overdue_threshold(r: redis.Redis) -> None:
    overdue("late", 30)
    beat(r, "w-1", [Q])  # a live worker serves the queue, but the job still waits
    assert cli("health", "--max-overdue", "60").returncode == 0
    done = cli("health", "--max-overdue", "10")
    assert done.returncode == 1
    assert "oldest due job waiting 3" in done.stdout and "(more than 10.0 s)" in done.stdout

    operations.pause(Q, "on purpose")  # a paused queue's due jobs wait on purpose
    done = cli("health", "--max-overdue", "10")
    assert done.returncode == 0, done.stdout
    assert "ok tests: paused" in done.stdout


# ---- Redis down -------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@only_on("single")  # points the child at a closed port of the single server's kind
@pytest.mark.parametrize(
    "args",
    [("status",), ("health",), ("purge-dead", Q, "--yes"), ("show", "01ARZ3NDEKTSV4RRFFQ69G5FAV")],
)
def test_redis_down_is_one_line_and_exit_1(args: tuple[str, ...]) -> None:
    env = child_env(DQ_TEST_REDIS_PORT=str(_closed_port()))
    started = time.monotonic()
    done = cli(*args, env=env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("CommandError: Redis at redis://127.0.0.1:") and "did not answer" in line
    assert time.monotonic() - started < 30
