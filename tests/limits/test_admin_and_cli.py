"""What the command line and the admin show of limits: each limited task's limits and their
state now; the dead list filtered to expired jobs."""

from __future__ import annotations

import json
import time
from io import StringIO
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.test import Client

from delayqueue.engine import transitions
from delayqueue.engine.execution import run
from delayqueue.engine.keys import queue_keys
from tests.support import limit_tasks
from tests.support.admin_pages import text, url, user_client

Q = queue_keys(limit_tasks.QUEUE)


def limits_json() -> list[dict[str, object]]:
    out = StringIO()
    call_command("delayqueue", "limits", "--json", stdout=out)
    found: list[dict[str, object]] = json.loads(out.getvalue())
    return found


def test_limits_shows_each_limited_task_and_its_state_now(r: redis.Redis) -> None:
    for i in range(3):
        limit_tasks.keyed.delay_for(f"a{i}", seconds=0, limit_key="provider:a", on_commit=False)
    limit_tasks.keyed.delay_for("n", seconds=0, on_commit=False)
    run(transitions.claim(Q, limit=100, visibility_ms=30_000))
    by_task = {str(task["task"]): task for task in limits_json()}
    keyed = by_task[limit_tasks.keyed.name]
    assert (keyed["rate"], keyed["concurrency"], keyed["expires_seconds"]) == ("4/s", 1, None)
    states = {str(s["limit_key"]): s for s in keyed["limits"]}  # type: ignore[attr-defined]
    assert states["provider:a"] == {
        "queue": "limits", "limit_key": "provider:a", "starts_in_window": 1, "running": 1,
        "waiting": 2,
    }  # fmt: skip
    assert states[""]["running"] == 1 and states[""]["waiting"] == 0
    assert by_task[limit_tasks.expiring.name]["expires_seconds"] == 30
    assert by_task[limit_tasks.rated.name]["limits"] == []  # idle: its state expired
    out = StringIO()
    call_command("delayqueue", "limits", stdout=out)
    assert "key 'provider:a' on limits: 1 started in the window, 1 running, 2 waiting" in (
        out.getvalue()
    )


@pytest.mark.django_db
def test_the_limits_page_shows_each_limit_and_the_dead_list_filters_expired(
    r: redis.Redis, django_user_model: Any
) -> None:
    client = user_client(django_user_model, "viewer", "view_jobs")
    for i in range(2):
        limit_tasks.keyed.delay_for(f"a{i}", seconds=0, limit_key="provider:a", on_commit=False)
    expired = limit_tasks.expiring.delay_for("late", seconds=0, expires=0.01, on_commit=False)
    time.sleep(0.05)
    run(transitions.claim(Q, limit=100, visibility_ms=30_000))
    # and one dead job that did not expire
    other = limit_tasks.rated.delay_for("x", seconds=0, on_commit=False)
    run(transitions.bury(Q, other.id, "unknown task"))
    page = text(client.get(url("limits")))
    assert limit_tasks.keyed.name in page and "<code>provider:a</code>" in page
    assert '<td class="num">1</td>' in page  # running
    assert "4/s" in page and "30.0 s" in page
    dead = text(client.get(url("list", limit_tasks.QUEUE, "dead") + "?reason=expired"))
    assert expired.id in dead and other.id not in dead
    assert other.id in text(client.get(url("list", limit_tasks.QUEUE, "dead")))
    anonymous = Client().get(url("limits"))
    assert anonymous.status_code == 302  # to the login page
