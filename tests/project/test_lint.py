"""ruff and mypy are part of the test command: a lint or type error fails the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_check() -> None:
    result = run("ruff", "check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = run("ruff", "format", "--check", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_contracts() -> None:
    """The layers of pyproject.toml's [tool.importlinter] contracts hold."""
    lint_imports = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run(
        [str(lint_imports), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_part_of_the_package_is_bound_by_the_redis_contract() -> None:
    """A new module or folder of delayqueue is named in the contract that only the engine
    imports redis (else it could import redis unseen)."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [contract] = [
        c
        for c in config["tool"]["importlinter"]["contracts"]
        if c.get("forbidden_modules") == ["redis", "hiredis"]
    ]
    named = set(contract["source_modules"])
    package = ROOT / "delayqueue"
    parts = {
        f"delayqueue.{path.stem}"
        for path in package.iterdir()
        if (path.suffix == ".py" and path.stem != "__init__")
        or (path.is_dir() and (path / "__init__.py").exists())
    }
    assert parts - named == {"delayqueue.engine"}


FIELD_CONSTANTS = {"JobField", "ScheduleField", "TaskResultField", "WorkerField"}


def hash_field_uses(source: str) -> list[tuple[int, str]]:
    """Where ``source`` imports or names one of the engine's hash field constants (line,
    name): ``from ... import JobField``, ``JobField.TASK``, ``keys.JobField``."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found += [(node.lineno, a.name) for a in node.names if a.name in FIELD_CONSTANTS]
        elif isinstance(node, ast.Name) and node.id in FIELD_CONSTANTS:
            found.append((node.lineno, node.id))
        elif isinstance(node, ast.Attribute) and node.attr in FIELD_CONSTANTS:
            found.append((node.lineno, node.attr))
    return sorted(found)


def test_hash_fields_stay_in_the_engine() -> None:
    """No module of delayqueue outside delayqueue/engine/ imports or names JobField,
    ScheduleField, TaskResultField or WorkerField: the engine hands out records and takes
    keyword arguments, and spells its hash fields itself."""
    package = ROOT / "delayqueue"
    engine = package / "engine"
    uses = [
        f"{path.relative_to(ROOT)}:{line} {name}"
        for path in sorted(package.rglob("*.py"))
        if engine not in path.parents
        for line, name in hash_field_uses(path.read_text())
    ]
    assert uses == []


def test_the_hash_field_check_sees_each_way_of_naming_a_field() -> None:
    source = (
        "from delayqueue.engine.keys import JobField\n"
        "from delayqueue.engine import keys\n"
        "x = keys.ScheduleField.TASK\n"
        "y = TaskResultField\n"
    )
    assert hash_field_uses(source) == [
        (1, "JobField"), (3, "ScheduleField"), (4, "TaskResultField")
    ]  # fmt: skip
