"""The benchmark suite still runs: ``python -m bench --smoke`` completes and its JSON has every
scenario with sane figures. Whether the goals are met is for the full, manual run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.processes import ROOT

SCENARIOS = {"enqueue", "claim", "dispatch", "lateness", "burst", "spread", "memory", "scale"}


def run_bench(out: Path, *options: str, timeout: float = 480) -> dict[str, Any]:
    """``python -m bench --smoke ...``'s JSON, once it ran to its end and printed its table."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DQ_TEST_", "DJANGO_SETTINGS_MODULE"))
    }  # the benchmark starts a redis-server of its own
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out), *options],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "delayqueue benchmark" in done.stdout  # the table
    return dict(json.loads(out.read_text()))


def test_bench_smoke_runs_every_scenario(tmp_path: Path) -> None:
    document = run_bench(tmp_path / "bench.json")
    figures = document["figures"]
    assert {f["scenario"] for f in figures} == SCENARIOS
    assert document["params"]["smoke"] is True
    for f in figures:
        assert math.isfinite(f["value"]) and math.isfinite(f["baseline"]), f
        assert f["baseline"] > 0, f
        timing = f["scenario"] in ("lateness", "spread") or f["unit"] == "ms"
        assert f["value"] > 0 or (timing and f["value"] >= 0), f
        assert f["unit"] and f["baseline_name"], f
    measures = {f["measure"] for f in figures}
    assert any("delay_many" in m for m in measures) and any("p99" in m for m in measures)


def test_the_periodic_and_tasks_scenarios_run_and_count_what_ran(tmp_path: Path) -> None:
    """Scenarios run only when named: every occurrence of 500 schedules due at one minute is
    counted (a tick read in a batch message counts its own job), none started early."""
    document = run_bench(tmp_path / "bench.json", "--only", "periodic,tasks", timeout=400)
    figures = {f["measure"]: f for f in document["figures"]}
    assert {f["scenario"] for f in figures.values()} == {"periodic", "tasks"}
    many = figures["500 schedules due in the same minute: occurrences run"]
    assert many["value"] == 500 and many["met"] is True, many
    early = [f for m, f in figures.items() if "before" in m]
    assert len(early) == 3 and all(f["value"] == 0 for f in early), early
    enqueue = next(f for m, f in figures.items() if m.startswith("Task.enqueue"))
    assert enqueue["value"] > 0 and enqueue["baseline"] > 0, enqueue
