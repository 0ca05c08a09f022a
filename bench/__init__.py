"""delayqueue's benchmark suite: ``python -m bench`` (full) or ``python -m bench --smoke``.

Not part of the wheel. It starts its own redis-server, Celery worker and delay workers, runs
every scenario, prints each figure beside a baseline measured in the same run on the same
Redis, and writes the figures as JSON.
"""
