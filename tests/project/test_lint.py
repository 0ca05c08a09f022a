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
