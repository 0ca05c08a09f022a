"""An app whose module imports its tasks itself (no include, no autodiscover_tasks())."""

from celery import Celery

app = Celery("importing_app")

import tests.setups.burst_tasks  # noqa: E402,F401  (registers the tasks with the app)
