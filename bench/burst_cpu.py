"""The CPU a burst's job costs each process, on Celery's defaults (``-P prefork -c 2``, ack
emulation on): ``python -m bench.burst_cpu [--jobs 20000] [--rounds 3] [--span 0]``.

``--jobs`` ``bench.tasks.stamp`` jobs due at one instant (or evenly over ``--span`` s) are
drained by one delay worker and the bench's Celery worker, as the burst and peers
scenarios run them. Printed per round: the drain's jobs/s, or with ``--span`` the lateness
p99 (wall, which the machine's load stretches), and the CPU µs per job of the Celery
worker's main process, of its pool processes, of the delay worker (``/proc/<pid>/stat``,
from just before the first job is due to the last start) and of the redis-server (INFO's
used_cpu, and its commands' µs from INFO commandstats: a script's own commands are counted
in it and again on their own), the Celery messages published (the broker's LPUSH calls:
its jobs per message), with the load average."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from bench.env import BenchEnv, CeleryConfig
from bench.timing import percentile

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _sample(env: BenchEnv, celery: int, pool: list[int], delay: int) -> dict[str, float]:
    info = env.client().info("cpu")
    commands = env.client().info("commandstats")
    return {
        **{f"redis {name[8:]}": float(row["usec"]) / 1e6 for name, row in commands.items()},
        "celery main": _cpu(celery),
        "celery pool": sum(_cpu(pid) for pid in pool),
        "delay worker": _cpu(delay),
        "redis": float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
    }


def _messages(env: BenchEnv) -> int:
    """The LPUSH calls the bench's Redis has served: one per Celery message published."""
    return int(env.client().info("commandstats").get("cmdstat_lpush", {}).get("calls", 0))


def _round(env: BenchEnv, jobs: int, span_ms: float) -> tuple[float, dict[str, float], int]:
    from bench.bursts import _schedule_delayqueue, _stamps
    from bench.tasks import stamp

    env.flush()
    celery = env.start_celery()
    pool = _children(celery.pid)
    delay = env.start_delay_workers(1, "bench")
    try:
        first = time.time() * 1000 + 1_000 + jobs * 0.2
        dues = [float(int(first + i * span_ms / jobs)) for i in range(jobs)]
        _schedule_delayqueue(stamp, dues)
        time.sleep(max(0.0, first / 1000 - time.time() - 0.05))
        before = _sample(env, celery.pid, pool, delay[0].pid)
        messages = _messages(env)
        rows = _stamps(env, jobs, span_ms / 1000 + 600)
        after = _sample(env, celery.pid, pool, delay[0].pid)
        messages = _messages(env) - messages
    finally:
        env.stop(delay)
    late = sorted(started - due for due, started in rows)
    cpu = {name: (after[name] - before.get(name, 0.0)) / jobs * 1e6 for name in after}
    cpu = {name: value for name, value in cpu.items() if value >= 0.5}
    if span_ms:
        return percentile(late, 99.0) / 1000, cpu, messages
    return jobs / max(0.001, late[-1] / 1000), cpu, messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.burst_cpu", description=__doc__)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--span", type=float, default=0.0, help="seconds the dues spread over")
    options = parser.parse_args(argv)
    env = BenchEnv(celery=CeleryConfig())
    cpu: dict[str, list[float]] = {}
    try:
        for _ in range(options.rounds):
            figure, per_job, messages = _round(env, options.jobs, options.span * 1000)
            for name, value in per_job.items():
                cpu.setdefault(name, []).append(value)
            what = "lateness p99 (s)" if options.span else "drained (jobs/s)"
            cpu.setdefault(what, []).append(figure)
            cpu.setdefault("jobs/message", []).append(options.jobs / max(1, messages))
            rows = ", ".join(f"{name} {value:.0f}" for name, value in per_job.items())
            load = ", ".join(f"{value:.1f}" for value in os.getloadavg())
            print(
                f"{what} {figure:,.2f}; {messages} messages ({options.jobs / max(1, messages):.0f}"
                f" jobs each); CPU µs/job: {rows}; load {load}"
            )
    finally:
        env.close()
    medians = ", ".join(f"{name} {statistics.median(v):,.2f}" for name, v in cpu.items())
    print(f"medians: {medians}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
