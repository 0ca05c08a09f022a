"""Several dispatch loops under one command: ``run_delay_worker --concurrency N``.

The command's process becomes a supervisor of N child processes, each running one
``DelayWorker`` with the same options. N loops in one command are N delay workers on the
same queues, which is already safe: every claim is an atomic script.

Children re-run the command (``python -m django run_delay_worker ... --concurrency 1``)
rather than being forked from the supervisor. A fresh interpreter inherits no socket,
thread, lock or import-time state of the supervisor, which serves metrics from a thread
and starts children again long after it started (forking a threaded process can copy a
lock some other thread held), and Prometheus' multiprocess mode is chosen when
``prometheus_client`` is first imported, which the supervisor may already have done. So a
child is exactly the single-process worker, the configuration that runs everywhere
today. The cost: each child imports Django and Celery itself (about a second) and shares
no memory with the others.

The supervisor
- starts the loops, each in a process group of its own (Ctrl-C in a terminal reaches the
  supervisor only, which passes it on once);
- passes on SIGTERM/SIGINT to every loop: the first as SIGTERM (each loop stops after its
  current pass), the second as SIGINT (a different signal, so the two are never merged
  into one pending signal: the loop exits at once, as a single worker does on a second
  signal); it exits when every loop has stopped, 0 when all stopped cleanly;
- starts a loop that dies unexpectedly again, after a backoff that doubles (from
  RESTART_FIRST up to RESTART_MAX seconds) while loops die within STABLE_AFTER seconds of
  their start, so a loop that cannot start does not spin;
- with ``once``, starts each loop once and waits for all of them (no restarts);
- with a health file, gives the file the modification time of the *oldest* of the loops'
  own health files: its age is the time since the slowest loop's last completed pass, and
  it grows while any loop is dead or stuck.

A loop dies with its supervisor (``join_supervisor``: Linux ``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

MAX_LOOPS = 64
TICK = 0.1  # seconds between the supervisor's looks at its loops
RESTART_FIRST = 0.5  # seconds before a loop that died is started again ...
RESTART_MAX = 30.0  # ... doubling while loops keep dying young, up to this
STABLE_AFTER = 30.0  # a loop that ran this long died old: its backoff starts again
HEALTH_EVERY = 0.5  # seconds between updates of the health file
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


@dataclass
class Loop:
    """One child process of the supervisor and what the supervisor knows of it."""

    index: int
    popen: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    start_at: float | None = 0.0  # when to start it next (a time.monotonic()); None: never
    signals_sent: int = 0
    young_deaths: int = 0

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen is not None else 0


class Fleet:
    """Runs ``size`` loops, each the process ``argv(index)`` with ``env``; see the module."""

    def __init__(
        self,
        size: int,
        argv: Callable[[int], list[str]],
        *,
        env: dict[str, str],
        once: bool = False,
        health_file: Path | None = None,
        health_of: Callable[[int], Path] | None = None,
    ) -> None:
        self.loops = [Loop(index) for index in range(size)]
        self.argv = argv
        self.env = env
        self.once = once
        self.health_file = health_file
        self.health_of = health_of
        self.signals = 0  # SIGTERM/SIGINT received (2 at most: the second is a cold stop)
        self.failed = False
        self._health_mtime = 0.0
        self._health_checked = 0.0
        self._health_failed = False

    def run(self) -> int:
        """Supervise until every loop has stopped: 0 when all stopped cleanly, else 1."""
        logger.info("supervisor (pid %s) starting %s loops", os.getpid(), len(self.loops))
        previous = self._install_signal_handlers()
        try:
            while not self._done():
                self._pass_on_signals()
                now = time.monotonic()
                for loop in self.loops:
                    self._look_at(loop, now)
                self._update_health(now)
                time.sleep(TICK)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self._stop_all()  # only left alive by an exception in the loop above
        cold = self.signals > 1
        logger.info("supervisor (pid %s): every loop stopped", os.getpid())
        return 1 if cold or self.failed else 0

    def _done(self) -> bool:
        return all(loop.popen is None and loop.start_at is None for loop in self.loops)

    # ---- signals ---------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, SignalHandler]:
        def received(signum: int, frame: FrameType | None) -> None:
            self.signals = min(self.signals + 1, 2)

        previous: dict[int, SignalHandler] = {}
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, received)
        return previous

    def _pass_on_signals(self) -> None:
        """Send each running loop the signals it has not had yet, and start no more."""
        if not self.signals:
            return
        for loop in self.loops:
            loop.start_at = None
            if loop.signals_sent == 0 and loop.popen is not None and self.signals == 1:
                logger.info("loop %s (pid %s): stopping after its pass", loop.index, loop.pid)
            while loop.popen is not None and loop.signals_sent < self.signals:
                sig = signal.SIGTERM if loop.signals_sent == 0 else signal.SIGINT
                loop.signals_sent += 1
                try:
                    os.kill(loop.popen.pid, sig)
                except ProcessLookupError:  # it died meanwhile: _look_at tells
                    pass

    # ---- starting, exits, restarts ---------------------------------------------------

    def _look_at(self, loop: Loop, now: float) -> None:
        if loop.popen is None:
            if loop.start_at is not None and loop.start_at <= now:
                self._start(loop, now)
            return
        code = loop.popen.poll()
        if code is None:
            return
        pid, loop.popen = loop.popen.pid, None
        self._forget_health(loop)
        if loop.signals_sent:  # we asked it to stop
            # (-SIGTERM: our signal came before it could catch one, so it had claimed nothing)
            clean = code in (0, -signal.SIGTERM) or loop.signals_sent > 1
            self._said_stopped(loop, pid, code, clean)
        elif self.once:
            self._said_stopped(loop, pid, code, code == 0)
            loop.start_at = None
        else:
            lived = now - loop.started
            if lived >= STABLE_AFTER:
                loop.young_deaths = 0
            delay = self._backoff(loop)
            loop.start_at = now + delay
            logger.error(
                "loop %s (pid %s) %s after %.1f s; starting it again in %.1f s",
                loop.index,
                pid,
                describe_exit(code),
                lived,
                delay,
            )

    def _said_stopped(self, loop: Loop, pid: int, code: int, clean: bool) -> None:
        if clean:
            logger.info("loop %s (pid %s) stopped (%s)", loop.index, pid, describe_exit(code))
        else:
            self.failed = True
            logger.error("loop %s (pid %s) %s", loop.index, pid, describe_exit(code))

    def _start(self, loop: Loop, now: float) -> None:
        loop.start_at, loop.signals_sent, loop.started = None, 0, now
        try:
            loop.popen = subprocess.Popen(
                self.argv(loop.index), env=self.env, stdin=subprocess.DEVNULL, process_group=0
            )
        except OSError as exc:
            delay = self._backoff(loop)
            loop.start_at = None if self.once else now + delay
            self.failed = self.failed or self.once
            again = "" if self.once else f"; trying again in {delay:.1f} s"
            logger.error("loop %s: cannot start it (%s)%s", loop.index, exc, again)
            return
        logger.info("loop %s started (pid %s)", loop.index, loop.popen.pid)

    @staticmethod
    def _backoff(loop: Loop) -> float:
        """Seconds before a loop that died is started again: doubles while it dies young."""
        delay = RESTART_FIRST * 2 ** min(loop.young_deaths, 16)
        loop.young_deaths += 1
        return min(RESTART_MAX, delay)

    def _stop_all(self) -> None:
        """Stop the loops still running, at once (the supervisor itself is failing)."""
        for loop in self.loops:
            if loop.popen is not None and loop.popen.poll() is None:
                loop.popen.kill()
                loop.popen.wait()

    # ---- health file -----------------------------------------------------------------

    def _update_health(self, now: float) -> None:
        if self.health_file is None or self.health_of is None or now < self._health_checked:
            return
        self._health_checked = now + HEALTH_EVERY
        try:
            oldest = min(self.health_of(loop.index).stat().st_mtime for loop in self.loops)
        except OSError:  # a loop is starting, or dead: the file ages meanwhile
            return
        if oldest == self._health_mtime:
            return
        try:
            self.health_file.touch()
            os.utime(self.health_file, (oldest, oldest))
        except OSError as exc:
            if not self._health_failed:
                logger.error("cannot touch the health file %s: %s", self.health_file, exc)
            self._health_failed = True
            return
        self._health_failed = False
        self._health_mtime = oldest

    def _forget_health(self, loop: Loop) -> None:
        if self.health_of is not None:
            self.health_of(loop.index).unlink(missing_ok=True)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def loop_environment(**extra: str) -> dict[str, str]:
    """This process's environment for a loop, with ``PYTHONPATH`` set to this process's
    ``sys.path``: the loop imports what this process imports, however it was started
    (``manage.py`` from another folder, ``--pythonpath``, ``call_command``)."""
    env = dict(os.environ)
    paths: list[str] = []
    for entry in sys.path:
        path = os.path.abspath(entry) if entry else os.getcwd()
        if path not in paths:
            paths.append(path)
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(extra)
    return env


def join_supervisor(supervisor_pid: int) -> bool:
    """In a loop: ask Linux to send this process SIGTERM when the supervisor dies, even by
    SIGKILL (``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing). False when the supervisor is
    already gone: the loop should not start."""
    if sys.platform.startswith("linux"):
        try:
            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            logger.warning("no prctl: this loop will outlive a supervisor that is killed")
        else:
            prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    return os.getppid() == supervisor_pid
