"""How the test command shares its tests between its pytest-xdist workers (``-n 2 --dist
loadgroup`` in pyproject.toml; tests/conftest.py installs this scheduler).

As xdist's loadgroup: each test is a unit of its own, handed to whichever worker is free, and
the tests of one ``xdist_group`` stay together on one worker. Two additions:

- The group ``alone`` (``@pytest.mark.xdist_group("alone")``: the chaos tests, whose faults
  and load figures are timed) runs after every other test, on one worker, while the other
  workers have nothing to run: no other test competes with it for the two cores.
- The longest tests (``FIRST``) are handed out first, so that no long test starts last
  while the other worker has run out of work.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from xdist.scheduler import LoadGroupScheduling

ALONE = "alone"

# Test modules (or tests) whose run takes minutes: they start first.
FIRST = ("tests/topologies/test_topologies.py",)


def _rank(scope: str) -> int:
    return 0 if scope.startswith(FIRST) else 1


class AloneLastScheduling(LoadGroupScheduling):
    """loadgroup, with the ``alone`` group last and by itself, and the longest tests first."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._ordered = False

    def _drained(self) -> bool:
        """No worker has a test to run beyond the one it keeps until it knows the next."""
        return all(self._pending_of(work) <= 1 for work in self.assigned_work.values())

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:  # the whole queue, at the first hand-out: the longest first,
            # the rest as collected, the alone group last
            self.workqueue = OrderedDict(
                sorted(self.workqueue.items(), key=lambda item: (item[0] == ALONE, _rank(item[0])))
            )
            self._ordered = True
        if ALONE in self.workqueue and len(self.workqueue) > 1:
            self.workqueue.move_to_end(ALONE)
        elif ALONE in self.workqueue and not self._drained():
            return  # the alone group waits until every other test has run
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if node.shutting_down:
            return
        if list(self.workqueue) == [ALONE]:
            if self._drained():
                super()._assign_work_unit(node)
            return  # this worker waits (its last test runs at the shutdown)
        super()._reschedule(node)
