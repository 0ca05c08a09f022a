"""An app whose registry lost delayqueue's own tasks (as a custom registry would have them)."""

from celery import Celery

from delayqueue import tasks

app = Celery("stripped_app")
app.tasks.unregister(tasks.RUN_TASK)
app.tasks.unregister(tasks.RUN_BATCH)
