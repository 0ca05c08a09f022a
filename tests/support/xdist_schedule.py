"""How the test command shares its tests between its pytest-xdist workers (``-n 3 --dist
loadgroup`` in pyproject.toml; tests/conftest.py installs this scheduler for ``loadgroup``).

As xdist's loadgroup: each test is a unit of its own, handed to whichever worker is free.
Two additions:

- The tests of ``ALONE`` (the chaos short forms, whose faults and rates are timed in seconds)
  run after every other test, one after the other on one worker, while the other workers
  have nothing to run: no other test competes with them for the cores. (A list of modules,
  not a mark: this process does not collect the tests, it only sees their ids.)
- The longest tests (``FIRST``) are handed out first, so that no long test starts last
  while the other worker has run out of work.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from xdist.scheduler import LoadGroupScheduling

ALONE = "alone"  # the name of their unit of work

# Test modules that run alone, at the end.
ALONE_MODULES = (
    "tests/delay_worker/test_chaos.py::",
    "tests/periodic/test_periodic_chaos.py::",
)

# Tests that take a minute or more (--durations): they start first, the longest first.
FIRST = (
    "tests/engine/test_fuzz_stored.py::",
    "tests/topologies/test_topologies.py::test_the_core_modules_pass_on",
    "tests/project/test_bench_smoke.py::",
    "tests/scheduling/test_fuzz_api.py::test_every_api_call",
    "tests/engine/test_state_machine.py::",
    "tests/topologies/test_topologies.py::",
    "tests/tracing/test_monitors.py::",  # waits for the next whole minute
    "tests/limits/test_with_workers.py::",
    "tests/tracing/test_tracing.py::",
)


def _rank(scope: str) -> int:
    """The place of a unit of work in the queue: the ``FIRST`` tests by their place there,
    the others after them."""
    return next((i for i, prefix in enumerate(FIRST) if scope.startswith(prefix)), len(FIRST))


class AloneLastScheduling(LoadGroupScheduling):
    """loadgroup, with the ``ALONE`` modules last and by themselves, the longest tests first."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self._ordered = False
        self.workqueue: OrderedDict[str, dict[str, bool]]

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.startswith(ALONE_MODULES):
            return ALONE
        return super()._split_scope(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:  # the whole queue, at the first hand-out: the longest first,
            # the rest as collected, the alone tests last
            self.workqueue = OrderedDict(
                sorted(self.workqueue.items(), key=lambda item: (item[0] == ALONE, _rank(item[0])))
            )
            self._ordered = True
        if len(self.workqueue) == 1 and ALONE in self.workqueue:
            self._start_alone()
        else:
            if ALONE in self.workqueue:
                self.workqueue.move_to_end(ALONE)
            super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if len(self.workqueue) == 1 and ALONE in self.workqueue:
            self._start_alone()
        else:
            super()._reschedule(node)

    def _start_alone(self) -> None:
        """Once every other test is handed out: every worker but one finishes (a worker keeps
        its last test until it hears of the next or of the end: it runs it now), and the last
        one gets the alone tests when the others have run every test they had."""
        open_nodes = [node for node in self.nodes if not node.shutting_down]
        if not open_nodes:
            return
        keeper, *others = open_nodes
        for node in others:
            if self._pending_of(self.assigned_work[node]) <= 1:
                node.shutdown()
        busy = [
            node
            for node, work in self.assigned_work.items()
            if node is not keeper and self._pending_of(work)
        ]
        if not busy and self._pending_of(self.assigned_work[keeper]) <= 1:
            super()._assign_work_unit(keeper)
