"""The Celery side: what runs inside a Celery worker when a job's message arrives.

``delayqueue.tasks`` registers delayqueue's Celery tasks; they hand each job to ``job``
(one job per message) or ``batches`` (many per message), which both run it through
``attempt``: the fencing-token check, the task, then ack, retry with backoff, or dead.
The delay worker's side of the message is ``delayqueue.wire``; this package never imports
``delayqueue.worker``."""
