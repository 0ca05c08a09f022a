"""A Celery worker whose delayqueue side cannot run batches: as one of a delayqueue version
before the batched hand-off would be (``delayqueue.run_batch`` unregistered). With
DQ_TEST_SILENT_SIDE=1 it neither announces itself nor settles what it discards (an older
side did neither), so only the delay worker's watch can notice."""

import os

from celery import Celery
from celery.signals import import_modules, task_unknown, worker_ready

app = Celery("old_side_app", include=["tests.setups.burst_tasks"])


@import_modules.connect
def _as_an_older_side(sender: object = None, **kwargs: object) -> None:
    from delayqueue import tasks

    app.tasks.unregister(tasks.RUN_BATCH)
    if os.environ.get("DQ_TEST_SILENT_SIDE") == "1":
        task_unknown.disconnect(tasks._settle_unknown)
        worker_ready.disconnect(tasks._announce_while_running)
