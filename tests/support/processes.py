"""Child processes (Celery workers, delay workers) with their output in a file: used by the
test suite and the benchmark."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def default_signals() -> None:
    """In a child, before it runs its program (``preexec_fn``): SIGINT as a terminal's Ctrl-C
    delivers it. A test run started as a shell script's background job, or under nohup,
    inherits SIGINT ignored, and a Python child started so never turns it into
    KeyboardInterrupt: tests that send it would wait for a child that cannot hear it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


def run_python(
    source: str, *argv: str, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """``source`` run in a new Python process (``argv`` its arguments) on the tests' settings
    and ``env``: it must exit 0."""
    done = subprocess.run(
        [sys.executable, "-c", source, *argv],
        cwd=ROOT,
        env=child_env(DJANGO_SETTINGS_MODULE="tests.settings", **env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr
    return done


class Process:
    """A child process with its output in a file (shown when a test fails)."""

    def __init__(self, name: str, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log
        self.handle = log.open("wb")
        self.popen = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            preexec_fn=default_signals,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        self.handle.flush()
        return self.log.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.handle.close()
        return self.popen.returncode


def start_celery_worker(
    log: Path,
    *options: str,
    env: dict[str, str] | None = None,
    timeout: float = 60,
) -> Process:
    """A real Celery worker of the demo's app on the suite's broker (or ``env``'s), once it
    said it is ready: prefork with 2 processes, unless ``options`` (``-P``, ``-c``, ``-n``,
    ...) say otherwise; raises with its output when it did not start."""
    import sys
    import time

    worker = Process(
        "celery",
        [sys.executable, "-m", "celery", "-A", "orders_demo", "worker", "-l", "info",
         *(options or ("-c", "2")), "--without-gossip", "--without-mingle",
         "--without-heartbeat"],
        log,
        child_env() if env is None else env,
    )  # fmt: skip
    deadline = time.monotonic() + timeout
    while "ready." not in worker.output() and worker.popen.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if "ready." not in worker.output():
        worker.stop()
        raise RuntimeError(f"Celery worker did not start:\n{worker.output()}")
    return worker
