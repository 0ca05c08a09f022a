"""``python manage.py delayqueue ARGS`` as a child process, with no terminal on stdin."""

from __future__ import annotations

import subprocess
import sys

from tests.support.processes import ROOT, child_env


def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "delayqueue", *args],
        cwd=ROOT,
        env=env or child_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
