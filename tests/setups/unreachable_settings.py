"""The suite's settings with delayqueue's Redis at DQ_TEST_UNREACHABLE_URL (a port nothing
listens on, or a server that refuses the password): what the command line and the worker
do when Redis cannot be reached."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DELAYQUEUE

DELAYQUEUE = {**DELAYQUEUE, "REDIS_URL": os.environ["DQ_TEST_UNREACHABLE_URL"]}
