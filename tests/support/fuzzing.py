"""Hypothesis budgets: the test command runs every property test derandomized, with a fixed
budget and no example database, so the same code gives the same result on every run.

``python -m tests.long_run --minutes N`` runs the same tests (those marked ``fuzz``) with
random seeds and a larger budget until the time is up: the profile "long".
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("DQ_HYPOTHESIS_PROFILE", "ci")
LONG_FACTOR = int(os.environ.get("DQ_HYPOTHESIS_FACTOR", "10"))

_COMMON: dict[str, object] = {
    "database": None,
    "deadline": None,
    "print_blob": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}
settings.register_profile("ci", derandomize=True, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("long", derandomize=False, **_COMMON)  # type: ignore[arg-type]
settings.load_profile(PROFILE)

# The health checks a property test over real Redis and real workers turns off: an example
# takes up to a second, its data is large, and its fixtures hold for all its examples.
SUPPRESS = [
    HealthCheck.too_slow,
    HealthCheck.filter_too_much,
    HealthCheck.function_scoped_fixture,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
]


def examples(ci: int) -> int:
    """The number of examples a property test runs: ``ci`` in the test command, more in the
    long runs."""
    return ci * LONG_FACTOR if PROFILE == "long" else ci
