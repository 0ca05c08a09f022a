"""``python -m tests.chaos``: the chaos scenarios (tests/chaos/scenarios.py), and the entry
points of the Celery worker and the delay worker they start."""

import sys

from tests.chaos.scenarios import main

sys.exit(main())
