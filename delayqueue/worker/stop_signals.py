"""How a delay worker stops on SIGTERM/SIGINT: the first signal is a warm stop (the current
batch is finished, then ``run`` returns), the second a cold stop (the process exits at once;
the jobs it claimed return to their queues after their visibility timeout)."""

from __future__ import annotations

import logging
import os
import signal
from types import FrameType
from typing import Protocol

logger = logging.getLogger("delayqueue.worker.loop")


class Stoppable(Protocol):
    stopping: bool


def install_stop_handlers(worker: Stoppable) -> None:
    """SIGTERM and SIGINT set ``worker.stopping``; a second one exits the process."""

    def stop(signum: int, frame: FrameType | None) -> None:
        if worker.stopping:
            logger.warning(
                "second signal: exiting now (claimed jobs return after their visibility timeout)"
            )
            os._exit(1)
        logger.info("signal %s: stopping after the current batch", signum)
        worker.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
