"""Settings of the benchmark: the test suite's (its own redis-server, whose port the parent
passes to child processes in DQ_TEST_REDIS_PORT) plus the benchmark's tasks."""

import os

from tests.settings import *  # noqa: F403

CELERY_IMPORTS = ["tests.support.jobs", "bench.tasks", "bench.django_tasks"]
# Jobs dispatched with no Celery worker consuming them wait in a queue of their own.
CELERY_TASK_ROUTES = {"bench.tasks.sink": {"queue": "bench-sink"}}
CELERY_WORKER_PREFETCH_MULTIPLIER = 4  # Celery's default; the worker's flag overrides it
# kombu's Redis ack emulation (bench.env.CeleryConfig; docs/worker.md, "Tuning the Celery worker")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "ack_emulation": os.environ.get("BENCH_CELERY_ACK_EMULATION", "1") == "1"
}
DELAYQUEUE = {"REDIS_URL": os.environ["REDIS_URL"], "SAFETY_POLL": 5.0}
if "BENCH_DISPATCH_MODE" in os.environ:  # the send_task baseline of the dispatch scenario
    DELAYQUEUE["DISPATCH_MODE"] = os.environ["BENCH_DISPATCH_MODE"]
LOGGING = {"version": 1, "disable_existing_loggers": False}
if os.environ.get("BENCH_SCHEDULES"):  # a JSON file of the periodic scenario's schedules
    import json
    import pathlib

    DELAYQUEUE["SCHEDULES"] = json.loads(pathlib.Path(os.environ["BENCH_SCHEDULES"]).read_text())
CELERY_BEAT_SCHEDULE = {"every-second": {"task": "bench.tasks.beat_tick", "schedule": 1.0}}
# Django's Tasks API on delayqueue (the tasks scenario): any queue (the bench's "bench").
TASKS = {"default": {"BACKEND": "delayqueue.tasks_backend.DelayQueueBackend", "QUEUES": []}}
