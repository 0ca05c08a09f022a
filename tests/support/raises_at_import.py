"""A module that raises when it is imported: a task path in Redis may name it, and reading
that result must neither import it nor raise what it raises
(tests/tasks_backend/test_results_hostile.py)."""

raise RuntimeError("tests.support.raises_at_import was imported")
