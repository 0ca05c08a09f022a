"""Each typed wrapper of delayqueue.engine.transitions (and of engine.schedules and
engine.task_results) sends its script exactly the KEYS the script's header lists, in that
order, and only resend-safe scripts say they are."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from delayqueue.engine import schedules, task_results, transitions
from delayqueue.engine.keys import QueueKeys

SCRIPTS = Path(transitions.__file__).parent / "lua"
KEYS = QueueKeys("dq", "Q")
JOB = "01JAAAAAAAAAAAAAAAAAAAAAAA"
HEADER_KEY = re.compile(r"^-- KEYS\[(\d+)\] .*?(dq:\{Q\}:\S*)", re.MULTILINE)

CALLS: dict[str, transitions.ScriptCall[Any]] = {
    "enqueue": transitions.enqueue(
        KEYS, [transitions.NewJob(JOB, "delay", 1, "", "keep", "t\n[]\n\n\n\n")], wake_horizon_ms=1
    ),
    "cancel": transitions.cancel(KEYS, job_id=JOB),
    "reschedule": transitions.reschedule(KEYS, job_id=JOB, mode="delay", ms=0),
    "claim": transitions.claim(KEYS, limit=1, visibility_ms=1000),
    "begin": transitions.begin(KEYS, JOB, "1", visibility_ms=1000),
    "ack": transitions.ack(KEYS, JOB, "1"),
    "fail": transitions.fail(
        KEYS, JOB, "1", backoff_ms=0, error="e", traceback="t", max_attempts=1, dead_max=1
    ),
    "reap": transitions.reap(KEYS, limit=1, max_attempts=1),
    "release": transitions.release(KEYS, JOB, delay_ms=0, give_back=True, reason="r"),
    "bury": transitions.bury(KEYS, JOB, "r"),
    "requeue": transitions.requeue(KEYS, JOB),
    "purge": transitions.purge_ids(KEYS, [JOB]),
    "pause": transitions.pause(KEYS, "paused"),
    "resume": transitions.resume(KEYS),
    # periodic schedules (delayqueue.engine.schedules); "<name>" is the headers' placeholder
    "plan_schedule": schedules.plan(
        KEYS, "<name>", next_ms=1, job_id=JOB, spec="t\n[]\n\n\n\n", wake_horizon_ms=1, seen=None
    ),
    "fire": schedules.fire(
        KEYS, "<name>", seen_ms=1, next_ms=2, job_id=JOB, missed=0, skip=False, wake_horizon_ms=1
    ),
    "unplan_schedule": schedules.unplan(KEYS, "<name>", "pause"),
    # a Django task's attempt (delayqueue.engine.task_results)
    "task_started": task_results.task_started(
        KEYS,
        JOB,
        now_ms=1,
        worker="w",
        ttl_seconds=1,
        kept=1,
        task="t",
        args="[]",
        kwargs="{}",
        backend="default",
        priority="0",
        status="RUNNING",
    ),
    "task_finished": task_results.task_finished(
        KEYS, JOB, 1, status="SUCCESSFUL", finished_ms=1, workers="[]", errors="[]"
    ),
}
RESEND_SAFE = {"enqueue", "begin", "ack", "plan_schedule", "task_started", "task_finished"}


def header_keys(script: str) -> list[str]:
    source = (SCRIPTS / f"{script}.lua").read_text()
    found = [(int(i), key) for i, key in HEADER_KEY.findall(source)]
    assert [i for i, _ in found] == list(range(1, len(found) + 1)), found
    return [key.replace("<id>", JOB) for _, key in found]


def matches(keys: list[str], header: list[str]) -> bool:
    """The call's keys are the header's, a stats key's epoch minute being any number."""
    patterns = [re.escape(key).replace("<minute>", r"\d+") for key in header]
    return len(keys) == len(patterns) and all(
        re.fullmatch(pattern, key) for pattern, key in zip(patterns, keys, strict=True)
    )


def test_every_script_has_a_wrapper() -> None:
    lua = {path.stem for path in SCRIPTS.glob("*.lua") if not path.stem.startswith("_")}
    assert lua == set(CALLS)


@pytest.mark.parametrize("script", sorted(CALLS))
def test_wrapper_keys_match_the_script_header(script: str) -> None:
    call = CALLS[script]
    assert call.script == script
    assert matches(call.keys, header_keys(script)), (call.keys, header_keys(script))
    assert call.resend_safe == (script in RESEND_SAFE)


def test_purge_oldest_uses_the_purge_keys() -> None:
    assert matches(transitions.purge_oldest(KEYS, 5).keys, header_keys("purge"))
