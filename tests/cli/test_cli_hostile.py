"""The command line and the worker against hostile arguments and a Redis that cannot be
reached or refuses the password: a clear line and an exit code, never a traceback or a wait
without end; ``--json`` says it in JSON."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest
import redis

from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.services import operations
from delayqueue.worker.loop import DelayWorker
from tests.support.command_line import cli
from tests.support.processes import ROOT, child_env
from tests.support.redis_server import RedisServer, free_port
from tests.support.states import Q, make_dead, schedule


def test_a_pause_note_that_is_not_utf8_pauses_with_the_note_escaped(r: redis.Redis) -> None:
    schedule("x")
    done = cli("pause", Q, "--note", "deploy \udcff", "--yes")  # the bytes b"deploy \xff"
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert operations.is_paused(Q)
    assert r.get(queue_keys(Q).paused) == "deploy \\udcff"


def test_show_prints_a_terminal_escape_from_redis_escaped(r: redis.Redis) -> None:
    job = make_dead("escaped", error="ValueError: \x1b]0;pwned\x07 \x1b[2J")
    shown = cli("show", job.id)
    assert shown.returncode == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "\\x1b]0;pwned\\x07" in shown.stdout


def test_show_prints_line_separators_and_odd_spaces_from_redis_escaped(r: redis.Redis) -> None:
    job = make_dead("separators", error="ValueError: one\u2028two\u2029three\xa0four")
    shown = cli("show", job.id)
    assert shown.returncode == 0, shown.stderr
    assert not {"\u2028", "\u2029", "\xa0"} & set(shown.stdout)
    assert "one\\u2028two\\u2029three\\xa0four" in shown.stdout


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    """A redis-server of its own that wants a password nobody here gives."""
    server = RedisServer().start()
    server.client().config_set("requirepass", "the-right-one")
    yield server
    server.cleanup()


def _unreachable(kind: str, locked: RedisServer) -> dict[str, str]:
    url = {
        "down": f"redis://127.0.0.1:{free_port()}/0",
        "wrong password": f"redis://:not-it@127.0.0.1:{locked.port}/0",
    }[kind]
    return child_env(
        DJANGO_SETTINGS_MODULE="tests.setups.unreachable_settings", DQ_TEST_UNREACHABLE_URL=url
    )


KINDS = ["down", "wrong password"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "command", [["status", "--json"], ["health", "--json"], ["show", "--json", "0" * 26]]
)
def test_json_commands_say_in_json_that_redis_cannot_be_reached(
    locked_redis: RedisServer, kind: str, command: list[str]
) -> None:
    done = cli(*command, env=_unreachable(kind, locked_redis), timeout=60)
    assert done.returncode == 1, (done.stdout, done.stderr)
    said = json.loads(done.stdout)
    assert said["exit_code"] == 1 and said["error"] and said["kind"].startswith("Redis")
    assert "Traceback" not in done.stderr
    assert "not-it" not in done.stdout + done.stderr  # the password is never shown


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("queues", [[], ["--queues", Q]], ids=["registry", "named"])
def test_a_drain_that_cannot_reach_redis_fails_at_once(
    locked_redis: RedisServer, kind: str, queues: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "run_delay_worker", "--once", *queues],
        cwd=ROOT,
        env=_unreachable(kind, locked_redis),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "nothing was dispatched" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_bad_registry_entry_is_logged_once_then_quietly(
    r: redis.Redis, caplog: pytest.LogCaptureFixture, parked_celery: object
) -> None:
    r.sadd(global_keys().queues, "not a queue name!")
    worker = DelayWorker(celery_app=parked_celery)  # type: ignore[arg-type]
    with caplog.at_level(logging.DEBUG, "delayqueue.worker.loop"):
        for _ in range(3):
            worker._last_heartbeat = 0.0
            worker._heartbeat()
    errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert [rec.getMessage() for rec in errors] == [
        "ignoring queue 'not a queue name!' found in Redis: not a valid queue name"
    ]
    assert sum("(again)" in rec.getMessage() for rec in caplog.records) == 2
