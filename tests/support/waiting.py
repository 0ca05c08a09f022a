"""Waiting for what another process does: poll a condition until it holds or a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02) -> Any:
    """Poll until ``predicate()`` is truthy; its value, or AssertionError at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s: {predicate}")
        time.sleep(interval)
