"""The suite's settings with the longest DISPATCH_AHEAD (1 s): a job is handed to Celery a
second before its due time (tests/delay_worker/test_threads_pool.py)."""

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQUEUE

DELAYQUEUE = {**DELAYQUEUE, "DISPATCH_AHEAD": 1.0}
