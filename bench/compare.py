"""``python -m bench.compare [--ref 704271d] [--after REF] [--rounds 3] [--only ...]
[--smoke]``: the bench of a git ref and of the working tree (or of ``--after REF``), in
turns, figure by figure.

The ref (and ``--after``'s) is checked out with ``git worktree add --detach`` into a
temporary directory (removed at the end): a run against a commit goes on unchanged while the
working tree is edited. Each round runs ``python -m bench --only ... --json ...`` once for
each side, the side that goes first alternating from round to round, with this interpreter
(the same .venv for both) and ``PYTHONPATH`` and the working directory set to the side's
tree, so that the bench, its Celery worker and its delay workers import that tree's
delayqueue (the editable install's finder comes after ``sys.path``). Then it prints every
figure: the median over the rounds of the ref ("before") and of the working tree ("after"),
their ratio, each side's median of the figure over its baseline measured in the same run
(raw EVALSHA, plain Celery...: what the machine's load did to that run), and each round's
values. A figure one side has and the other lacks shows "-".

``--pick COMMIT`` (repeatable) applies a commit to the ref's checkout before it runs
(``git cherry-pick --no-commit``): a fix to the bench's own harness that came after the ref,
such as the plain ``delay()`` baseline of the burst, which could not send its backlog in time
on a slow run. Pick only commits that touch ``bench/`` baselines, never the code measured.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_REF = "704271d"  # the commit before the structure step (issue 32)
DEFAULT_ONLY = "enqueue,dispatch,burst,lateness,tasks,periodic"

# (scenario, measure and the baseline it is beside) -> (value, unit, value / that baseline
# in the same run or None); one measure may stand beside several baselines (delay_for
# beside the raw EVALSHA and beside Celery's countdown), one row each
Figures = dict[tuple[str, str], tuple[float, str, float | None]]


def run_bench(tree: Path, only: str, out: Path, smoke: bool) -> Figures:
    """One ``python -m bench`` in ``tree``; its figures."""
    args = [sys.executable, "-m", "bench", "--only", only, "--json", str(out)]
    if smoke:
        args.append("--smoke")
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(args, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        tail = (done.stdout + done.stderr)[-3000:]
        raise SystemExit(f"python -m bench failed in {tree} ({done.returncode}):\n{tail}")
    return read_figures(out)


def read_figures(path: Path) -> Figures:
    document = json.loads(path.read_text())
    return {
        (f["scenario"], _beside(f)): (
            float(f["value"]),
            str(f["unit"]),
            float(f["value"]) / float(f["baseline"]) if f.get("baseline") else None,
        )
        for f in document["figures"]
    }


def _beside(figure: dict[str, Any]) -> str:
    name = figure.get("baseline_name")
    return f"{figure['measure']} | {name}" if name else str(figure["measure"])


def read_rounds(directory: Path) -> tuple[list[Figures], list[Figures]]:
    """The figures a run left in ``directory`` (its temporary one, while it runs)."""
    return (
        [read_figures(p) for p in sorted(directory.glob("before-*.json"))],
        [read_figures(p) for p in sorted(directory.glob("after-*.json"))],
    )


def which_delayqueue(tree: Path) -> str:
    """Where ``delayqueue`` is imported from with ``tree``'s PYTHONPATH (printed, to check)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    code = "import delayqueue; print(delayqueue.__file__)"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    ).stdout.strip()


def number(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def table(before: list[Figures], after: list[Figures]) -> str:
    keys: list[tuple[str, str]] = []
    for figures in before + after:
        keys += [k for k in figures if k not in keys]
    rows = [
        ("scenario", "measure", "unit", "before", "after", "ratio", "x baseline b | a",
         "rounds before | after")
    ]  # fmt: skip
    for key in keys:
        unit = next(f[key][1] for f in before + after if key in f)
        b = [f[key][0] for f in before if key in f]
        a = [f[key][0] for f in after if key in f]
        mb = statistics.median(b) if b else None
        ma = statistics.median(a) if a else None
        ratio = f"{ma / mb:.2f}" if mb and ma is not None else "-"
        bb = [x for f in before if key in f and (x := f[key][2]) is not None]
        ab = [x for f in after if key in f and (x := f[key][2]) is not None]
        vs = f"{statistics.median(bb):.2f} | {statistics.median(ab):.2f}" if bb and ab else "-"
        each = " ".join(number(v) for v in b) + " | " + " ".join(number(v) for v in a)
        rows.append((key[0], key[1][:90], unit, number(mb), number(ma), ratio, vs, each))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) if i < 3 else cell.rjust(w) for i, (cell, w) in
                  enumerate(zip(row, widths, strict=True))).rstrip()
        for row in rows
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__)
    parser.add_argument("--ref", default=DEFAULT_REF, help="the git ref measured as 'before'")
    parser.add_argument("--after", default="", help="a git ref measured as 'after' (default: "
                        "the working tree as it is)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=3, help="bench runs per side")
    parser.add_argument("--only", default=DEFAULT_ONLY, help="scenarios, as python -m bench")
    parser.add_argument("--smoke", action="store_true", help="python -m bench --smoke")
    parser.add_argument("--pick", action="append", default=[], help="a commit of bench fixes "
                        "applied to the ref's checkout (repeatable)")  # fmt: skip
    parser.add_argument("--table", type=Path, help="only print the table of the figures a "
                        "run left in this directory (before-N.json, after-N.json)")  # fmt: skip
    options = parser.parse_args(argv)
    if options.table:
        print(table(*read_rounds(options.table)))
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-compare-") as scratch:
        ref_tree = Path(scratch) / "ref"
        after_tree = Path(scratch) / "after" if options.after else ROOT
        made = [(ref_tree, options.ref)] + ([(after_tree, options.after)] if options.after else [])
        for tree, ref in made:
            subprocess.run(
                ["git", "worktree", "add", "--detach", "--quiet", str(tree), ref],
                cwd=ROOT,
                check=True,
            )
        for commit in options.pick:
            subprocess.run(["git", "cherry-pick", "--no-commit", commit], cwd=ref_tree, check=True)
        try:
            for side, tree in (("before", ref_tree), ("after", after_tree)):
                print(f"{side}: {tree} imports {which_delayqueue(tree)}", flush=True)
            sides: dict[str, list[Figures]] = {"before": [], "after": []}
            for n in range(options.rounds):
                order = [("before", ref_tree), ("after", after_tree)]
                for side, tree in order if n % 2 == 0 else order[::-1]:
                    print(f"round {n + 1}/{options.rounds}: {side} ...", flush=True)
                    out = Path(scratch) / f"{side}-{n}.json"
                    sides[side].append(run_bench(tree, options.only, out, options.smoke))
                if n + 1 < options.rounds:  # (so far: a run cut short still says something)
                    print(table(sides["before"], sides["after"]), flush=True)
        finally:
            for tree, _ in made:
                subprocess.run(
                    ["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False
                )
    after = options.after or "the working tree"
    print(f"\nbefore: {options.ref}, after: {after}; medians of {options.rounds} rounds")
    print(table(sides["before"], sides["after"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
