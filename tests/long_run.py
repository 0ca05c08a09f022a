"""Run the property tests and fuzzers (tests marked ``fuzz``) with random seeds and a larger
budget, round after round, until the time is up:

    .venv/bin/python -m tests.long_run --minutes 10 [--factor 10] [-k state_machine]

The test command runs the same tests derandomized with a small budget (tests/support/fuzzing.py).
Each round is one pytest run with ``--hypothesis-seed`` set to a fresh random seed, so a
failure names the seed that reproduces it. Exit code 1 when any round failed.

``--failover`` runs the failover chaos instead (tests/chaos/failover.py): delayqueue's Redis
master SIGKILLed again and again on a Sentinel set and on a cluster, with and without
DURABLE, for ``--minutes`` in all; it prints what each lost and ran twice, and fails when a
durable run lost a job or a worker died (``-k`` picks scenarios by name).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--factor", type=int, default=10, help="examples per test x this")
    parser.add_argument("-k", dest="keyword", help="pytest -k expression")
    parser.add_argument("--failover", action="store_true", help="the failover chaos instead")
    options = parser.parse_args()
    if options.failover:
        command = [sys.executable, "-m", "tests.chaos.failover", "--minutes", str(options.minutes)]
        if options.keyword:
            command += ["--only", options.keyword]
        return subprocess.run(command, cwd=ROOT).returncode

    env = {
        **os.environ,
        "DQ_HYPOTHESIS_PROFILE": "long",
        "DQ_HYPOTHESIS_FACTOR": str(options.factor),
    }
    deadline = time.monotonic() + options.minutes * 60
    rounds, failed_seeds, passed = 0, [], 0
    started = time.monotonic()
    while time.monotonic() < deadline:
        seed = random.SystemRandom().randrange(2**32)
        command = [
            sys.executable, "-m", "pytest", "-m", "fuzz", "-q", "-p", "no:cacheprovider",
            f"--hypothesis-seed={seed}", "-o", f"timeout={600 * options.factor}",
        ]  # fmt: skip
        if options.keyword:
            command += ["-k", options.keyword]
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        rounds += 1
        summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
        found = re.search(r"(\d+) passed", summary)
        passed += int(found.group(1)) if found else 0
        print(f"round {rounds}: seed {seed}: {summary}", flush=True)
        if result.returncode != 0:
            failed_seeds.append(seed)
            # Each failure's header, its assertion lines and hypothesis's falsifying example
            # first: the tail alone is mostly captured log lines.
            kept = [
                line
                for line in result.stdout.splitlines()
                if line.startswith(("E ", "____", "FAILED", "Falsifying", "You can reproduce"))
            ]
            print("\n".join(kept[:400]), flush=True)
            print(result.stdout[-6000:], result.stderr[-2000:], sep="\n", flush=True)
    minutes = (time.monotonic() - started) / 60
    print(
        f"{rounds} rounds in {minutes:.1f} min, {passed} test runs passed, "
        f"{len(failed_seeds)} rounds failed (seeds: {failed_seeds or 'none'})"
    )
    return 1 if failed_seeds else 0


if __name__ == "__main__":
    sys.exit(main())
