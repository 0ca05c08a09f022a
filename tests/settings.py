"""Settings of the test suite: the demo's settings on a redis-server and a SQLite file of
the suite's own. Child processes (Celery worker, delay workers) inherit the environment and
use the same server and database file. The process that starts the server removes it and
its folders when it exits, is stopped by SIGTERM or dies (the server gets SIGTERM then).

``DQ_TEST_TOPOLOGY`` puts delayqueue's own data on another topology the suite starts itself:
``cluster`` (3 masters, 3 replicas) or ``sentinel`` (a master, a replica, 3 sentinels). The
Celery broker stays on the single server (Celery has no Cluster transport).
tests/topologies/test_topologies.py runs the core test modules that way."""

import functools
import json
import os
import shutil
import tempfile

TOPOLOGY = os.environ.setdefault("DQ_TEST_TOPOLOGY", "single")
if TOPOLOGY not in ("single", "cluster", "sentinel"):
    raise RuntimeError(f"DQ_TEST_TOPOLOGY={TOPOLOGY!r}: single, cluster or sentinel")

# One server and one folder per test run, and per pytest-xdist worker: a worker inherits its
# controller's environment, so the server it finds there is the controller's (another owner);
# the children a test starts inherit the worker's, and use its server.
_OWNER = (
    f"{os.environ.get('PYTEST_XDIST_WORKER', '')}:{os.environ.get('PYTEST_XDIST_TESTRUNUID', '')}"
)
if "DQ_TEST_REDIS_PORT" not in os.environ or os.environ.get("DQ_TEST_OWNER", _OWNER) != _OWNER:
    from tests.support.redis_server import (
        WORKER_FOLDERS,
        RedisServer,
        cleanup_on_exit,
        remove_listed,
    )

    _server = RedisServer().start()
    _test_dir = tempfile.mkdtemp(prefix="dq-test-")
    if os.environ.get("PYTEST_XDIST_WORKER") and "DQ_TEST_DIR" in os.environ:
        # A worker lists its folders in the run's: the run removes them at its end too, for
        # a worker that xdist killed (the run stopped) before its own cleanup ran.
        with open(os.path.join(os.environ["DQ_TEST_DIR"], WORKER_FOLDERS), "a") as listed:
            listed.write(f"{_server.dir}\n{_test_dir}\n")
    # At exit, and on SIGTERM/SIGHUP: stop the server, remove its folder, its workers' and
    # the suite's own.
    _remove_dir = functools.partial(shutil.rmtree, _test_dir, ignore_errors=True)
    cleanup_on_exit(_server.cleanup, functools.partial(remove_listed, _test_dir), _remove_dir)
    os.environ["DQ_TEST_REDIS_PORT"] = str(_server.port)
    os.environ["DQ_TEST_REDIS_RUN_ID"] = str(_server.run_id)
    os.environ["DQ_TEST_DIR"] = _test_dir
    os.environ["DQ_TEST_RUN_IDS"] = str(_server.run_id)
    os.environ["DQ_TEST_OWNER"] = _OWNER
    if TOPOLOGY == "cluster":
        from tests.support.topologies import ClusterSet

        _cluster = ClusterSet().start()
        cleanup_on_exit(_cluster.cleanup)
        os.environ["REDIS_URL"] = os.environ["DQ_TEST_DELAYQUEUE_URL"] = _cluster.url
        os.environ["REDIS_CLUSTER"] = "true"
        os.environ["DQ_TEST_RUN_IDS"] = ",".join(_cluster.run_ids().values())
    elif TOPOLOGY == "sentinel":
        from tests.support.topologies import SentinelSet

        _sentinels = SentinelSet().start()
        cleanup_on_exit(_sentinels.cleanup)
        os.environ["DQ_TEST_DELAYQUEUE_URL"] = _sentinels.url
        assert _sentinels.master is not None
        os.environ["REDIS_URL"] = _sentinels.master.url  # the tests look there directly
        os.environ["DQ_TEST_RUN_IDS"] = str(_sentinels.master.run_id)

_port = os.environ["DQ_TEST_REDIS_PORT"]
if TOPOLOGY == "single":  # delayqueue's data (flushed between tests) beside the broker's
    os.environ["REDIS_URL"] = os.environ["DQ_TEST_DELAYQUEUE_URL"] = f"redis://127.0.0.1:{_port}/0"
# Celery's queues (db 1: never flushed; chaos tests may point it at a broker of their own)
os.environ["CELERY_BROKER_URL"] = os.environ.get(
    "DQ_TEST_BROKER_URL", f"redis://127.0.0.1:{_port}/1"
)
os.environ["DATABASE_URL"] = f"sqlite:///{os.environ['DQ_TEST_DIR']}/test.sqlite3"
os.environ["ORDER_PAYMENT_TIMEOUT"] = "1800"

from orders_demo.settings import *  # noqa: E402,F403

DATABASES["default"]["TEST"] = {"NAME": DATABASES["default"]["NAME"]}  # noqa: F405
CELERY_IMPORTS = ["tests.support.jobs", "tests.support.limit_tasks"]
CELERY_BROKER_URL = os.environ["CELERY_BROKER_URL"]
DELAYQUEUE = {"REDIS_URL": os.environ["DQ_TEST_DELAYQUEUE_URL"], "SAFETY_POLL": 2.0}
if TOPOLOGY == "cluster":
    DELAYQUEUE["REDIS_CLUSTER"] = True
elif TOPOLOGY == "sentinel":
    DELAYQUEUE["SENTINEL_MASTER"] = "mymaster"
if os.environ.get("DQ_TEST_SCHEDULES"):  # periodic schedules for child delay workers
    DELAYQUEUE["SCHEDULES"] = json.loads(os.environ["DQ_TEST_SCHEDULES"])
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
if os.environ.get("DQ_TEST_OTEL_DIR") or os.environ.get("DQ_TEST_SENTRY_DSN"):
    from tests.support.telemetry import set_up  # tracing and monitors (tests/tracing/)

    set_up()
