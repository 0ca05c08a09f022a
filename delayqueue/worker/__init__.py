"""The delay worker: a loop that reaps and claims due jobs (``loop``), times its sleep by
Redis's clock (``clock``) and hands jobs to Celery (``publisher_choice``, ``publisher``)."""

from delayqueue.worker.loop import DelayWorker

__all__ = ["DelayWorker"]
