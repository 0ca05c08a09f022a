"""An app that imports the task module under another name than the web process does: as
``burst_tasks``, found through sys.path, where the web process imports
``tests.setups.burst_tasks``. Only a task named explicitly is the same task in both."""

import sys
from pathlib import Path

from celery import Celery

sys.path.insert(0, str(Path(__file__).resolve().parent))
app = Celery("renamed_app", include=["burst_tasks"])
