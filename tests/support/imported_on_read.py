"""A module no test imports: a task path in Redis may name it, and reading that result must
not import it (tests/tasks_backend/test_results_hostile.py checks ``sys.modules``)."""
