"""Where Redis's clock stands against ``time.monotonic()``: the delay worker sleeps until
a job is due by Redis's clock (the clock of every due time), to a fraction of a ms."""

from __future__ import annotations


class RedisClock:
    """Where Redis's clock (the clock of every due time) stands against ``time.monotonic()``,
    so that the worker wakes when a job is due by Redis's clock, to a fraction of a ms.

    Each claim reply carries Redis's ``now``, floored to the ms and read before the reply
    arrived: ``now - replied`` is a lower bound of the offset between the two clocks, and the
    largest bound seen lies within a fraction of a ms of the truth once a few passes have
    run. Waking at ``point - offset`` is therefore never before ``point``, and about 0.5 ms
    sooner on average than waking ``point - now`` ms after the reply (which the floor of
    ``now`` makes up to 1 ms late). The estimate gives up 1 ms per second (far more than any
    drift between the clocks) and is dropped for the current bound whenever Redis says a
    point it predicted is not reached yet (Redis's clock was set back): never a busy loop.
    """

    DRIFT = 0.001  # ms given up per ms elapsed

    def __init__(self) -> None:
        self.offset_ms: float | None = None  # Redis ms minus monotonic ms, a lower bound
        self._at = 0.0

    def observe(self, now_ms: int, replied: float) -> None:
        bound = now_ms - replied * 1000
        if self.offset_ms is not None:
            bound = max(bound, self.offset_ms - (replied - self._at) * 1000 * self.DRIFT)
        self.offset_ms, self._at = bound, replied

    def reset(self, now_ms: int, replied: float) -> None:
        self.offset_ms, self._at = now_ms - replied * 1000, replied

    def monotonic_at(self, point_ms: int) -> float:
        """When ``time.monotonic()`` reaches Redis's ``point_ms``, at the earliest."""
        assert self.offset_ms is not None
        return (point_ms - self.offset_ms) / 1000
