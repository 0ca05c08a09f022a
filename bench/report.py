"""Figures, each beside its baseline, as a rich table and as JSON."""

from __future__ import annotations

import json
import math
import os
import platform
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass
class Figure:
    scenario: str
    measure: str
    value: float
    unit: str
    baseline_name: str
    baseline: float
    goal: str = ""
    met: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.value / self.baseline if self.baseline else math.nan


def _fmt(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    if unit in ("ms",):
        return f"{value:,.1f} {unit}"
    if unit == "s":
        return f"{value:,.2f} {unit}"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.0f} {unit}"


def print_table(figures: list[Figure], console: Console | None = None, caption: str = "") -> None:
    console = console or Console()
    table = Table(title="delayqueue benchmark", caption=caption or None, show_lines=False)
    for name, justify in (
        ("scenario", "left"), ("measure", "left"), ("value", "right"),
        ("baseline (same run, same Redis)", "left"), ("ratio", "right"),
        ("goal", "left"), ("met", "center"),
    ):  # fmt: skip
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for f in figures:
        met = "" if f.met is None else ("[green]yes[/]" if f.met else "[red]no[/]")
        table.add_row(
            f.scenario,
            f.measure,
            _fmt(f.value, f.unit),
            f"{f.baseline_name}: {_fmt(f.baseline, f.unit)}",
            f"{f.ratio:.2f}" if not math.isnan(f.ratio) else "-",
            f.goal,
            met,
        )
    console.print(table)


def write_json(figures: list[Figure], path: Path, params: dict[str, Any]) -> Path:
    import redis

    path.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "redis_py": redis.__version__,
        },
        "params": params,
        "figures": [{**asdict(f), "ratio": f.ratio} for f in figures],
    }
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")
    return path
