"""Sentry cron monitors of periodic jobs (docs/tracing.md): sentry-sdk in a real Celery
worker sends its envelopes to a local endpoint this test starts (no outside network)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from django.test import override_settings

from delayqueue.conf import get_settings
from delayqueue.integrations.sentry_crons import monitor_config
from delayqueue.periodic.declarations import Declared
from tests.support import jobs
from tests.support.telemetry import SentryEndpoint
from tests.support.waiting import wait_for

RECORD, FAILS = jobs.record.name, jobs.always_fails.name


@pytest.fixture
def sentry() -> Iterator[SentryEndpoint]:
    endpoint = SentryEndpoint()
    yield endpoint
    endpoint.close()


def _declared(cron: str | None = None, every_ms: int | None = None) -> Declared:
    return Declared(
        "nightly", RECORD, cron, every_ms, "Europe/Paris", "once", "code", lambda: ("", "", "")
    )


def test_the_monitor_config_says_the_schedules_rule() -> None:
    config = get_settings()
    assert monitor_config(_declared(cron="0 6 * * *"), config) == {
        "schedule": {"type": "crontab", "value": "0 6 * * *"},
        "timezone": "Europe/Paris",
        "checkin_margin": 1,
        "max_runtime": 5,  # VISIBILITY_TIMEOUT (300 s), the longest an attempt runs
    }
    intervals = {60_000: (1, "minute"), 5_400_000: (90, "minute"), 7_200_000: (2, "hour")}
    intervals[2 * 86_400_000] = (2, "day")
    for every_ms, (value, unit) in intervals.items():
        made = monitor_config(_declared(every_ms=every_ms), config)
        assert made is not None
        assert made["schedule"] == {"type": "interval", "value": value, "unit": unit}
    assert monitor_config(_declared(every_ms=30_000), config) is None  # Sentry: whole minutes
    with override_settings(DELAYQUEUE={"SENTRY_CHECKIN_MARGIN": 3, "SENTRY_MAX_RUNTIME": 20}):
        made = monitor_config(_declared(cron="0 6 * * *"), get_settings())
        assert made is not None and (made["checkin_margin"], made["max_runtime"]) == (3, 20)


def test_each_occurrence_sends_one_check_in_pair_whatever_the_number_of_delay_workers(
    r: redis.Redis, sentry: SentryEndpoint, traced_workers: Callable[..., Any]
) -> None:
    """Two delay workers, four monitored schedules (a cron line in a timezone and an
    interval, each with a task that succeeds and one that fails until dead) and one that is
    not monitored: at the next whole minute each monitored occurrence sends in_progress per
    attempt and one ok or error, all under one check-in id, with its monitor config."""

    def schedule(task: str, tag: str, **rule: Any) -> dict[str, Any]:
        return {"task": task, "args": [tag], "queue": "tests", **rule}

    settings = {
        "cron-ok": schedule(RECORD, "cron-ok", cron="* * * * *", timezone="Europe/Paris"),
        "cron-error": schedule(FAILS, "cron-error", cron="* * * * *"),
        "every-ok": schedule(RECORD, "every-ok", every=60),
        "every-error": schedule(FAILS, "every-error", every=60),
        "quiet": schedule(RECORD, "quiet", every=60),
    }
    for name in ("cron-ok", "cron-error", "every-ok", "every-error"):
        settings[name]["monitor"] = True
    traced_workers(
        delay_workers=2,
        DQ_TEST_SCHEDULES=json.dumps(settings),
        DQ_TEST_SENTRY_DSN=sentry.dsn,
    )

    def finals() -> set[str]:
        return {c["monitor_slug"] for c in sentry.check_ins() if c["status"] in ("ok", "error")}

    wait_for(lambda: finals() >= {"cron-ok", "cron-error", "every-ok", "every-error"}, 100)
    wait_for(lambda: any(run["tag"] == "quiet" for run in jobs.ran("record")), 15)
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for check_in in sentry.check_ins():
        by_id[check_in["check_in_id"]].append(check_in)
    slugs = {check_ins[0]["monitor_slug"] for check_ins in by_id.values()}
    assert slugs == {"cron-ok", "cron-error", "every-ok", "every-error"}  # "quiet" sends none
    runs: dict[str, int] = defaultdict(int)
    for run in jobs.ran():
        runs[str(run["tag"])] += 1
    for check_ins in by_id.values():
        slug = check_ins[0]["monitor_slug"]
        statuses = [c["status"] for c in check_ins]
        if statuses[-1] not in ("ok", "error"):
            continue  # an occurrence of the next minute, still running
        if slug.endswith("-ok"):
            assert statuses == ["in_progress", "ok"], statuses
        else:  # always_fails: 3 attempts, each in progress, then dead: error
            assert statuses == ["in_progress"] * 3 + ["error"], statuses
        assert check_ins[-1]["duration"] >= 0
        config = check_ins[0]["monitor_config"]
        assert config["timezone"] == ("Europe/Paris" if slug == "cron-ok" else "UTC")
        assert config["checkin_margin"] == 1 and config["max_runtime"] == 5
        if slug.startswith("cron"):
            assert config["schedule"] == {"type": "crontab", "value": "* * * * *"}
        else:
            assert config["schedule"] == {"type": "interval", "value": 1, "unit": "minute"}
    # one pair per occurrence, not one per delay worker: as many check-in ids as runs
    for slug, tag, attempts in (("cron-ok", "cron-ok", 1), ("every-ok", "every-ok", 1)):
        ids = [i for i, c in by_id.items() if c[0]["monitor_slug"] == slug]
        assert len(ids) == runs[tag] // attempts, (slug, runs)
