"""The benchmark suite still runs: ``python -m bench --smoke`` completes and its JSON has every
scenario with sane figures. Whether the goals are met is for the full, manual run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from tests.support.processes import ROOT

SCENARIOS = {"enqueue", "claim", "dispatch", "lateness", "burst", "spread", "memory", "scale"}


def test_bench_smoke_runs_every_scenario(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DQ_TEST_", "DJANGO_SETTINGS_MODULE"))
    }  # the benchmark starts a redis-server of its own
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "delayqueue benchmark" in done.stdout  # the table

    document = json.loads(out.read_text())
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
