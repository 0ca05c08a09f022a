"""The core test modules once more with delayqueue's data on a Redis Cluster (3 masters, 3
replicas) and on a Sentinel set (a master, a replica, 3 sentinels), each started by the run
itself (tests/settings.py, ``DQ_TEST_TOPOLOGY``).

Each topology is a pytest run of its own in a child process: the Django settings, the Celery
worker and the delay workers the modules start must all see the same topology from their
first line. The modules are the scripts, the API, the worker, end to end, the admin and
sharded queues; what
only a topology has (failover, the cluster's slots) is in test_cluster.py and
test_sentinel.py."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.processes import ROOT

CORE_MODULES = [
    "tests/engine/test_scripts.py",
    "tests/scheduling/test_api.py",
    "tests/delay_worker/test_worker.py",
    "tests/delay_worker/test_end_to_end.py",
    "tests/admin/test_admin.py",
    "tests/scheduling/test_shards.py",
    "tests/periodic/test_schedules.py",
    "tests/tracing/test_tracing.py",  # one trace across the delay (docs/tracing.md)
]
# The async API on each topology; its tests of one Redis's own connection (a dropped
# connection, a timeout, TLS) are skipped there, and say so.
ASYNC_MODULE = "tests/scheduling/test_async_api.py"

# What the parent run set for its own single server: the child starts its own topology.
PARENT_ONLY = re.compile(r"DQ_TEST_.*|REDIS_URL|REDIS_CLUSTER|CELERY_BROKER_URL|DATABASE_URL")


def _run_on(topology: str, modules: list[str]) -> subprocess.CompletedProcess[str]:
    env = {name: value for name, value in os.environ.items() if not PARENT_ONLY.fullmatch(name)}
    env.update(DQ_TEST_TOPOLOGY=topology, PYTHONPATH=str(ROOT))
    # in the child process itself, without pytest-xdist workers (each would start a topology)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0"]
    return subprocess.run(
        [*command, *modules],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.mark.parametrize("topology", ["cluster", "sentinel"])
def test_the_core_modules_pass_on(topology: str) -> None:
    run = _run_on(topology, CORE_MODULES)
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    failed = [line for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    output = [run.stdout[-6000:], run.stderr[-3000:]]
    shown = "\n".join([f"on {topology}: {summary}", *failed, *output])
    assert run.returncode == 0, shown
    # every test ran: none skipped for the topology, and a count that says the modules ran
    assert re.fullmatch(r"\d+ passed in .*", summary), summary
    assert int(summary.split()[0]) >= 190, summary


@pytest.mark.parametrize("topology", ["cluster", "sentinel"])
def test_the_async_api_passes_on(topology: str) -> None:
    run = _run_on(topology, [ASYNC_MODULE, "-rs"])
    summary = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0, "\n".join([f"on {topology}: {summary}", run.stdout[-6000:]])
    passed = re.fullmatch(r"(\d+) passed, (\d+) skipped in .*", summary)
    assert passed and int(passed[1]) >= 25, summary
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all("needs the single topology" in line for line in skips), skips
