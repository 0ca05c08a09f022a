"""Periodic jobs under delay workers killed at random: an every-second schedule, N delay
workers (each reconciling it when it starts), one SIGKILLed every few seconds and started
again, a real Celery worker running each occurrence. Afterwards every occurrence of the
window must have run exactly once (by its job id: the schedule's name and its instant).

    .venv/bin/python -m tests.chaos.periodic [--seconds 120] [--workers 3]

The test command runs a short form (tests/periodic/test_periodic_chaos.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import redis

from tests.support.processes import Process, child_env
from tests.support.waiting import wait_for

SCHEDULE = "chaos-every-second"
# missed="all": when every worker happens to be down at once (three killed within the
# seconds a restart takes), the occurrences of that gap run when one is back, each once.
SETTING = {SCHEDULE: {"task": "tests.support.jobs.occurrence", "every": 1, "args": ["chaos"],
                      "queue": "tests", "missed": "all"}}  # fmt: skip


@dataclass
class Outcome:
    expected: int  # occurrences in the window
    ran_once: int
    lost: list[str]
    doubled: list[str]
    kills: int

    def ok(self) -> bool:
        return not self.lost and not self.doubled


def run(folder: Path, seconds: float, workers: int, seed: int) -> Outcome:
    """Run the chaos for ``seconds`` against the Redis of ``REDIS_URL`` (the suite's) and a
    running Celery worker."""
    from delayqueue.periodic.identity import occurrence_id

    rng = random.Random(seed)
    env = child_env(DQ_TEST_SCHEDULES=json.dumps(SETTING))
    command = [sys.executable, "manage.py", "run_delay_worker", "--queues", "tests",
               "--visibility-timeout", "2", "-v", "2"]  # fmt: skip
    made = 0

    def start() -> Process:
        nonlocal made
        made += 1
        return Process("delay worker", command, folder / f"delay-worker-{made}.log", env)

    running = [start() for _ in range(workers)]
    # The chaos starts once every worker is up (the schedule planned): a kill during a
    # worker's start-up, which takes seconds on a loaded machine, would test nothing.
    wait_for(lambda: all(up(worker) for worker in running), timeout=120, interval=0.2)
    kills = 0
    started = time.time()
    try:
        while time.time() - started < seconds:
            time.sleep(rng.uniform(0.3, 3.0))
            ready = [worker for worker in running if up(worker)]
            if not ready:
                continue  # all of them still starting
            victim = ready[rng.randrange(len(ready))]
            running.remove(victim)
            victim.popen.send_signal(signal.SIGKILL)
            victim.stop()  # (dead already: closes its log)
            kills += 1
            running.append(start())
        ended = time.time()
        # The window: whole seconds after every worker had started, before the chaos ended.
        first, last = int(started) + 1, int(ended) - 1
        expected = {occurrence_id(SCHEDULE, s * 1000) for s in range(first, last + 1)}
        # The workers left running finish the window's occurrences (a claim a killed worker
        # held is reaped after 2 s, and runs); then a little longer, so that an occurrence
        # that would run twice has the time to.
        with contextlib.suppress(AssertionError):  # (the outcome says what is missing)
            wait_for(lambda: expected <= set(runs_of()), timeout=60, interval=0.2)
        time.sleep(3)
    finally:
        for worker in running:
            worker.stop()
    runs = runs_of()
    lost = sorted(i for i in expected if runs[i] == 0)
    doubled = sorted(i for i in expected if runs[i] > 1)
    return Outcome(len(expected), sum(1 for i in expected if runs[i] == 1), lost, doubled, kills)


def up(worker: Process) -> bool:
    """Whether ``worker`` has started its passes (its log says so)."""
    return "starting (claims" in worker.output()


def runs_of() -> Counter[str]:
    """How many times each occurrence ran (by its job id), from the jobs' reports."""
    from tests.support import jobs

    return Counter(str(run["tag"]).split(":", 1)[1] for run in jobs.ran("occurrence"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120)
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None)
    options = parser.parse_args()
    import os
    import tempfile

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    django.setup()  # tests/settings.py starts a redis-server of its own
    from tests.support.processes import start_celery_worker

    seed = options.seed if options.seed is not None else random.SystemRandom().randrange(2**32)
    folder = Path(tempfile.mkdtemp(prefix="periodic-chaos-"))
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    client.flushall()
    celery = start_celery_worker(folder / "celery.log")
    try:
        outcome = run(folder, options.seconds, options.workers, seed)
    finally:
        celery.stop()
    print(
        f"seed {seed}: {options.workers} delay workers, {outcome.kills} SIGKILLs in "
        f"{options.seconds:g} s; {outcome.expected} occurrences in the window, "
        f"{outcome.ran_once} ran exactly once, {len(outcome.lost)} lost, "
        f"{len(outcome.doubled)} ran twice or more (logs: {folder})"
    )
    return 0 if outcome.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
