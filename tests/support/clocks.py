"""Clocks a test pins so that its outcome does not depend on where the wall clock falls: a
plan made in the last instants of a minute (or an hour) is for the next one, and a test that
plans, then reads Redis's clock to check the plan, or plans twice, must not meet that."""

from __future__ import annotations

import pytest
import redis

from delayqueue.periodic import planner
from tests.support.states import redis_ms

MINUTE = 60_000
HOUR = 60 * MINUTE


def mid_hour(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> int:
    """Give the planner a clock at ten seconds past half past the next hour (returned), so
    that an every-minute rule's next occurrence (hh:31) and an hourly one's (hh+1:00) are
    two instants, and every plan of the test is made in one minute and one hour, whatever
    the wall clock says: in the minute before a full hour both rules' next occurrence
    would be that hour, and a plan made just before a minute ends is for a minute that has
    begun when the test reads Redis's clock."""
    clock = (redis_ms(r) // HOUR + 1) * HOUR + 30 * MINUTE + 10_000
    monkeypatch.setattr(planner, "redis_now", lambda: clock)
    return clock
