"""The version matrix: the whole test suite (ruff, mypy and the import contracts included) on
each Python / Django / Celery / redis-py row delayqueue supports, each in a virtualenv of its
own built from that row's interpreter.

    .venv/bin/nox                         # every row
    .venv/bin/nox -s django61             # one row
    .venv/bin/nox -s django61 -- tests/scheduling/test_api.py   # some modules

Interpreters are found by version (on PATH, or pyenv's under ``$(pyenv root)/versions``); a
missing one is an error that names it, never a skipped row.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import nox

nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"
nox.options.default_venv_backend = "venv"
nox.options.reuse_venv = "yes"

# Each row: its interpreter and the pins that make it that row. django-stubs follows the
# row's Django (the mypy run inside the suite type-checks against that Django).
ROWS: dict[str, tuple[str, list[str]]] = {
    # Django 5.2 LTS on Python 3.11, with the oldest Celery, kombu and redis-py supported.
    "django52_oldest": (
        "3.11",
        [
            "django>=5.2,<5.3",
            "django-stubs>=5.2,<5.3",
            "celery==5.4.0",
            "kombu==5.4.0",
            "redis[hiredis]==5.0.8",
        ],
    ),
    "django60": (
        "3.12",
        [
            "django>=6.0,<6.1",
            "django-stubs>=6.0,<6.1",
            "celery>=5.7,<5.8",
            "kombu>=5.7,<5.8",
            "redis[hiredis]>=8.1,<8.2",
        ],
    ),
    "django61": (
        "3.13",
        [
            "django>=6.1,<6.2",
            "django-stubs>=6.1,<6.2",
            "celery>=5.7,<5.8",
            "kombu>=5.7,<5.8",
            "redis[hiredis]>=8.1,<8.2",
        ],
    ),
}


def _interpreter(version: str) -> str:
    """``pythonX.Y`` on PATH, else pyenv's newest X.Y.*; the bare version when neither has it
    (nox then stops the row with "Python interpreter X.Y not found")."""
    on_path = shutil.which(f"python{version}")
    if on_path and _runs(on_path):  # (not a pyenv shim of a version that is not active)
        return on_path
    root = os.environ.get("PYENV_ROOT") or _pyenv_root()
    found = sorted(
        glob.glob(os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")),
        key=lambda path: [
            int(part) for part in path.split(os.sep)[-3].split(".") if part.isdigit()
        ],
    )
    return found[-1] if found else version


def _runs(python: str) -> bool:
    try:
        return subprocess.run([python, "-c", ""], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _pyenv_root() -> str:
    try:
        return subprocess.run(
            ["pyenv", "root"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.path.expanduser("~/.pyenv")


# redis-py annotates every sync reply as ``Awaitable[Any] | Any`` before 8.0 (mypy finds 137
# errors in our code on 5.0.8, 132 on 7.4.1, none on 8.0.0). A row that runs an older
# redis-py is type-checked against these annotations instead, put on MYPYPATH: the types
# mypy checks are the same on every row, the runtime under test is the row's own.
TYPING_REDIS = "redis==8.1.0"


def _row(session: nox.Session, name: str) -> None:
    _, pins = ROWS[name]
    session.install("-e", ".[dev,demo]", *pins)
    session.env["MYPY_CACHE_DIR"] = os.path.join(session.virtualenv.location, "mypy-cache")
    redis_pin = next(pin for pin in pins if pin.startswith("redis"))
    if "==" in redis_pin and int(redis_pin.split("==")[1].split(".")[0]) < 8:
        typing_dir = os.path.join(session.virtualenv.location, "typing-redis")
        session.install("--no-deps", "--upgrade", "--target", typing_dir, TYPING_REDIS)
        session.env["MYPYPATH"] = typing_dir
    session.run("python", "-m", "pip", "check")
    session.run(
        "python", "-c",
        "import django, celery, kombu, redis; print('Django', django.get_version(), "
        "'Celery', celery.__version__, 'kombu', kombu.__version__, 'redis-py', redis.__version__)",
    )  # fmt: skip
    session.run("pytest", *session.posargs)


@nox.session(python=_interpreter(ROWS["django52_oldest"][0]))
def django52_oldest(session: nox.Session) -> None:
    """Python 3.11, Django 5.2 LTS, Celery 5.4, kombu 5.4, redis-py 5.0."""
    _row(session, "django52_oldest")


@nox.session(python=_interpreter(ROWS["django60"][0]))
def django60(session: nox.Session) -> None:
    """Python 3.12, Django 6.0, Celery 5.7, redis-py 8.1."""
    _row(session, "django60")


@nox.session(python=_interpreter(ROWS["django61"][0]))
def django61(session: nox.Session) -> None:
    """Python 3.13, Django 6.1, Celery 5.7, redis-py 8.1."""
    _row(session, "django61")
