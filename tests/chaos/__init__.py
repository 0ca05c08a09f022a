"""The chaos harnesses: real processes broken while jobs are scheduled, then every job
accounted for. Each has a short form in the test command and a long form of its own:

- ``scenarios``: the delay worker, the Celery worker and the Redis servers killed, stopped
  or slowed (``python -m tests.chaos --soak``; short form tests/delay_worker/test_chaos.py);
- ``failover``: delayqueue's Redis master failed over under a Sentinel set or a cluster
  (``python -m tests.chaos.failover``, or ``python -m tests.long_run --failover``);
- ``periodic``: delay workers running a schedule killed at random
  (``python -m tests.chaos.periodic``; short form tests/periodic/test_periodic_chaos.py)."""
