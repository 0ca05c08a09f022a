"""``run_delay_worker --concurrency N``: a supervisor and N loops, each a real delay worker
in a child process (delayqueue/worker/fleet.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from django.core.management import CommandError, call_command
from prometheus_client.parser import text_string_to_metric_families

import delayqueue
from delayqueue.engine.keys import global_keys, queue_keys
from tests.support import jobs
from tests.support.processes import ROOT, Process, child_env
from tests.support.redis_server import free_port
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

START = 60  # seconds for loops to start: each imports Django and Celery, on 2 busy cores


def children_of(pid: int) -> set[int]:
    """The live (not zombie) child processes of ``pid``, from /proc."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if int(ppid) == pid and state != "Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def registered_pids(r: redis.Redis) -> set[int]:
    """The pids of the delay workers in the heartbeat registry (GlobalKeys.workers)."""
    ids = [str(wid) for wid in r.zrange(global_keys().workers, 0, -1)]  # (decode_responses: str)
    return {int(r.hget(global_keys().worker(wid), "pid") or 0) for wid in ids}


def start_loops(
    delay_worker: Callable[..., Process], r: redis.Redis, count: int, *options: str
) -> tuple[Process, set[int]]:
    """The supervisor, once each of its ``count`` loops has a heartbeat; and their pids."""
    supervisor = delay_worker("--queues", "tests", "--concurrency", str(count), *options)
    pids = wait_for(lambda: len(registered_pids(r)) == count and registered_pids(r), START)
    assert supervisor.alive(), supervisor.output()
    return supervisor, pids


def run_once_each(r: redis.Redis, count: int, prefix: str) -> None:
    """Schedule ``count`` jobs due within a second; each runs exactly once."""
    specs = [
        delayqueue.spec(jobs.record, [f"{prefix}{i}"], delay=0.2 + i / count) for i in range(count)
    ]
    delayqueue.delay_many(specs)
    wait_for(lambda: len(jobs.ran("record")) >= count, 60)
    wait_for(lambda: r.zcard(queue_keys("tests").inflight) == 0)
    tags = sorted(str(run["tag"]) for run in jobs.ran("record"))
    assert tags == sorted(f"{prefix}{i}" for i in range(count))  # each exactly once


@pytest.mark.parametrize("value", [0, -1, 65, 1000, "abc", "2.5", "", 2.5, True, None])
def test_a_bad_concurrency_is_a_command_error(value: object) -> None:
    with pytest.raises(CommandError, match=r"--concurrency must be a whole number .* 1 to 64"):
        call_command("run_delay_worker", concurrency=value)


def test_a_bad_concurrency_on_the_command_line_says_what_is_wanted() -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "run_delay_worker", "--concurrency", "three"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "--concurrency must be a whole number of loops from 1 to 64, not 'three'" in done.stderr


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"queues": "tests,no spaces"}, "queue name 'no spaces'"),
        ({"claim_size": 0}, "--claim-size"),
        ({"metrics_port": 70000}, "not a TCP port"),
    ],
)
def test_bad_options_fail_before_any_loop_starts(options: dict[str, object], message: str) -> None:
    before = children_of(os.getpid())
    with pytest.raises(CommandError, match=message):
        call_command("run_delay_worker", concurrency=3, **options)
    assert children_of(os.getpid()) == before


def test_three_loops_are_three_workers_and_run_every_job_once(
    celery_worker: Process, delay_worker: Callable[..., Process], r: redis.Redis
) -> None:
    supervisor, pids = start_loops(delay_worker, r, 3, "--claim-size", "20")
    assert len(pids) == 3 and supervisor.pid not in pids
    assert children_of(supervisor.pid) == pids  # the registered workers are its children
    run_once_each(r, 150, "c")
    output = supervisor.output()
    for index in range(3):
        assert f"loop {index} started (pid " in output
        assert f"loop {index} (pid " in output  # the loop's own line, with its pid


def test_a_killed_loop_is_started_again_and_jobs_still_flow(
    celery_worker: Process, delay_worker: Callable[..., Process], r: redis.Redis
) -> None:
    supervisor, pids = start_loops(delay_worker, r, 2)
    survivors = {max(pids)}

    def replacement(of: int) -> int:
        return wait_for(lambda: (children_of(supervisor.pid) - survivors - {of} or {0}).pop(), 30)

    victim = min(pids)
    os.kill(victim, signal.SIGKILL)
    young = replacement(victim)
    os.kill(young, signal.SIGKILL)  # dies young too: the next start waits longer
    new = replacement(young)
    wait_for(lambda: new in registered_pids(r), START)  # the third one has a heartbeat
    output = supervisor.output()
    index = re.search(rf"loop (\d) \(pid {victim}\) was killed by SIGKILL", output)
    assert index, output
    assert f"loop {index[1]} (pid {young}) was killed by SIGKILL" in output
    assert "starting it again in 0.5 s" in output
    assert "starting it again in 1.0 s" in output
    run_once_each(r, 40, "k")
    assert children_of(supervisor.pid) == survivors | {new}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_loop_after_its_pass_and_the_supervisor_exits_0(
    delay_worker: Callable[..., Process], r: redis.Redis, sig: int
) -> None:
    supervisor, pids = start_loops(delay_worker, r, 2)
    supervisor.popen.send_signal(sig)
    assert supervisor.popen.wait(30) == 0, supervisor.output()
    assert not any(alive(pid) for pid in pids)
    assert r.zcard(global_keys().workers) == 0  # each loop said goodbye: a warm stop
    output = supervisor.output()
    assert output.count("signal 15: stopping after the current batch") == 2  # passed on once
    for pid in pids:
        assert f"(pid {pid}) stopped (exited with code 0)" in output
    assert "starting it again" not in output


def test_a_second_signal_makes_every_loop_exit_at_once(
    delay_worker: Callable[..., Process], r: redis.Redis
) -> None:
    supervisor, pids = start_loops(delay_worker, r, 2)
    supervisor.popen.send_signal(signal.SIGSTOP)  # both signals are pending when it resumes
    supervisor.popen.send_signal(signal.SIGTERM)
    supervisor.popen.send_signal(signal.SIGINT)
    supervisor.popen.send_signal(signal.SIGCONT)
    assert supervisor.popen.wait(30) == 1, supervisor.output()  # a cold stop, as one worker's
    assert not any(alive(pid) for pid in pids)
    assert supervisor.output().count("second signal: exiting now") == 2


def test_loops_die_with_a_killed_supervisor(
    delay_worker: Callable[..., Process], r: redis.Redis
) -> None:
    supervisor, pids = start_loops(delay_worker, r, 2)
    supervisor.popen.send_signal(signal.SIGKILL)
    supervisor.popen.wait(10)
    wait_for(lambda: not any(alive(pid) for pid in pids), 30)
    # PR_SET_PDEATHSIG sent them SIGTERM: a warm stop, each said goodbye
    wait_for(lambda: r.zcard(global_keys().workers) == 0, 10)


def test_once_drains_with_every_loop_then_the_command_exits(
    celery_worker: Process, r: redis.Redis, tmp_path: Path
) -> None:
    count = 200
    specs = [delayqueue.spec(jobs.record, [f"o{i}"], delay=0) for i in range(count)]
    delayqueue.delay_many(specs)
    command = [sys.executable, "manage.py", "run_delay_worker", "-v", "2", "--queues", "tests",
               "--concurrency", "2", "--once", "--claim-size", "10"]  # fmt: skip
    supervisor = Process("delay worker", command, tmp_path / "once.log", child_env())
    try:
        code = supervisor.popen.wait(START)
        output = supervisor.output()
    finally:
        supervisor.stop()
    assert code == 0, output
    assert r.zcard(queue_keys("tests").scheduled) == 0
    for index in range(2):
        assert f"loop {index} started" in output
    assert output.count("stopped (exited with code 0)") == 2
    dispatched = [int(n) for n in re.findall(r"stopped after (\d+) dispatches", output)]
    assert len(dispatched) == 2 and sum(dispatched) == count  # each job by one loop
    assert "starting it again" not in output
    wait_for(lambda: len(jobs.ran("record")) >= count, 60)
    assert sorted(str(run["tag"]) for run in jobs.ran("record")) == sorted(
        f"o{i}" for i in range(count)
    )


def test_metrics_port_serves_the_sum_of_the_loops(
    celery_worker: Process, delay_worker: Callable[..., Process], r: redis.Redis
) -> None:
    port = free_port()
    start_loops(delay_worker, r, 2, "--metrics-port", str(port), "--claim-size", "5")
    run_once_each(r, 60, "m")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert samples[("delayqueue_jobs_dispatched_total", (("queue", "tests"),))] == 60
    assert samples[("delayqueue_delay_workers", ())] == 2
    assert samples[("delayqueue_redis_up", ())] == 1


def test_health_file_ages_while_any_loop_is_stuck(
    delay_worker: Callable[..., Process], r: redis.Redis, tmp_path: Path
) -> None:
    health = tmp_path / "alive"

    def age() -> float:
        return time.time() - health.stat().st_mtime

    supervisor, pids = start_loops(delay_worker, r, 2, "--health-file", str(health))
    wait_for(health.exists, 10)
    # Each loop passes at least every SAFETY_POLL (2 s) and touches its file then (at most
    # every second); the supervisor looks every 0.5 s: while all pass, the age stays < 3 s.
    wait_for(lambda: age() < 3.0, 10)
    stuck = min(pids)
    os.kill(stuck, signal.SIGSTOP)
    try:
        wait_for(lambda: age() > 5.0, 15)  # the other loop passes on; the file ages anyway
        assert supervisor.alive()
    finally:
        os.kill(stuck, signal.SIGCONT)
    wait_for(lambda: age() < 3.0, 15)
