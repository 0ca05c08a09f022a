"""The suite's settings, with the Celery app of a set-up (DQ_TEST_CELERY_APP) as the one the
delay worker dispatches with. The demo's app (the Django project template's set-up) finds
the set-up tests' tasks through CELERY_IMPORTS; the other apps ignore Django's settings."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import CELERY_IMPORTS, DELAYQUEUE

DELAYQUEUE = {**DELAYQUEUE, "CELERY_APP": os.environ["DQ_TEST_CELERY_APP"]}
CELERY_IMPORTS = [*CELERY_IMPORTS, "tests.setups.burst_tasks"]
