"""Fuzzing what Redis holds of Django Tasks results: every field of a result's hash, the
job's own record (task, arguments, attempts), its score in its state (``±inf``, huge,
negative), keys of the wrong type; for a job scheduled, in flight, dead and gone.

The property (docs/tasks-backend.md): ``get_result`` and ``aget_result`` return a result
or raise ``TaskResultDoesNotExist``, nothing else, and never import a module a result
names that is no task of this process."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

compat = pytest.importorskip("delayqueue.django_tasks.compat")

import redis  # noqa: E402
from django.test import override_settings  # noqa: E402
from django.utils import timezone  # noqa: E402
from hypothesis import Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import delayqueue  # noqa: E402
from delayqueue.engine import clients as connection  # noqa: E402
from delayqueue.engine.keys import JobField, TaskResultField, queue_keys  # noqa: E402
from tests.support import tasks_framework as tasks  # noqa: E402
from tests.support.corrupt import SCORES, VALUES, raw_redis, set_wrong_type  # noqa: E402
from tests.support.fuzzing import SUPPRESS, examples  # noqa: E402

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db(transaction=True)]

Q = queue_keys("default")
BACKEND = "delayqueue.tasks_backend.DelayQueueBackend"
ADD = "tests.support.tasks_framework.add"
NEVER_IMPORTED = "tests.support.imported_on_read"
TAGS = ["scheduled", "inflight", "dead", "gone"]
RESULT_FIELDS = [value for name, value in vars(TaskResultField).items() if name.isupper()]
RECORD_FIELDS = [JobField.TASK, JobField.ARGS, JobField.KWARGS, JobField.ATTEMPTS,
                 JobField.MAX_ATTEMPTS]  # fmt: skip
RESULT_VALUES: list[bytes | None] = [
    *VALUES,
    f"{NEVER_IMPORTED}.task".encode(),
    b"tests.support.raises_at_import.task",
    b"." * 3000,
    b"a." * 1500 + b"b",
    ADD.encode(),
    b"True",
    b"true",
    b"SUCCESSFUL",
    b"RUNNING",
    b"FAILED",
    b"-1e20",
    b"1e20",
    b'[["builtins.ValueError", "' + b"x" * 30_000 + b'"]]',
    b'["w"]' * 2,
    b'["add", 1, 2]',
    b'[1, {"priority": true, "backend": 5}]',
]
RESULT_SCORES = [*SCORES, 1e20, -1e20, -(10**15), 1e17]
WRONG_TYPES = ["string", "list", "set", "zset"]

CORRUPTIONS = st.one_of(
    st.tuples(
        st.just("result"),
        st.sampled_from(TAGS),
        st.sampled_from(RESULT_FIELDS),
        st.sampled_from(RESULT_VALUES),
    ),  # fmt: skip
    st.tuples(
        st.just("record"),
        st.sampled_from(TAGS),
        st.sampled_from(RECORD_FIELDS),
        st.sampled_from(RESULT_VALUES),
    ),  # fmt: skip
    st.tuples(st.just("score"), st.sampled_from(TAGS), st.sampled_from(RESULT_SCORES)),
    st.tuples(
        st.just("key"),
        st.sampled_from(TAGS),
        st.sampled_from(["result", "job"]),
        st.sampled_from(WRONG_TYPES),
    ),  # fmt: skip
)


@pytest.fixture(autouse=True)
def delayqueue_backend() -> Iterator[None]:
    setting = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"],
                           "OPTIONS": {"MAX_ATTEMPTS": 3}}}  # fmt: skip
    with override_settings(TASKS=setting):
        yield


@pytest.fixture
def fresh(r: redis.Redis) -> Callable[[], None]:
    def reset() -> None:
        r.flushdb()
        connection.reset()

    return reset


def plant(raw: redis.Redis) -> dict[str, str]:
    """A result of ``add`` in each state, with a results hash as an attempt writes it."""
    later = timezone.now() + timedelta(hours=1)
    ids = {tag: str(tasks.add.using(run_after=later).enqueue(tag, 1, 2).id) for tag in TAGS}
    raw.zrem(Q.scheduled, ids["inflight"], ids["dead"])
    raw.zadd(Q.inflight, {ids["inflight"]: 9e12})
    raw.zadd(Q.dead, {ids["dead"]: 1.7e12})
    delayqueue.cancel("default", ids["gone"])
    for tag, job_id in ids.items():
        raw.hset(Q.task_result(job_id), mapping={
            TaskResultField.TASK: ADD, TaskResultField.ARGS: f'["{tag}", 1, 2]',
            TaskResultField.KWARGS: "{}", TaskResultField.STATUS: "SUCCESSFUL",
            TaskResultField.RETURN: "3", TaskResultField.WORKERS: '["celery@x"]',
            TaskResultField.STARTED: "1700000000000", TaskResultField.FINISHED: "1700000001000",
        })  # fmt: skip
    return ids


def apply(raw: redis.Redis, ids: dict[str, str], corruption: tuple[Any, ...]) -> None:
    kind, tag = corruption[0], corruption[1]
    job_id = ids[tag]
    try:
        if kind == "result":
            _, _, name, value = corruption
            if value is None:
                raw.hdel(Q.task_result(job_id), name)
            else:
                raw.hset(Q.task_result(job_id), name, value)
        elif kind == "record":
            _, _, name, value = corruption
            if raw.exists(Q.job(job_id)):
                if value is None:
                    raw.hdel(Q.job(job_id), name)
                else:
                    raw.hset(Q.job(job_id), name, value)
            elif raw.hexists(Q.spec_bucket(job_id), job_id):  # never claimed: its spec
                raw.hset(Q.spec_bucket(job_id), job_id, value or b"")
        elif kind == "score":
            for state in ("scheduled", "inflight", "dead"):
                raw.zadd(getattr(Q, state), {job_id: corruption[2]}, xx=True)
        else:
            key = Q.task_result(job_id) if corruption[2] == "result" else Q.job(job_id)
            set_wrong_type(raw, key, corruption[3])
    except redis.ResponseError as exc:  # an earlier corruption gave the key another type
        if not str(exc).startswith("WRONGTYPE"):
            raise


def read_each(ids: dict[str, str], problems: list[str]) -> None:
    backend = compat.task_backends["default"]
    for tag, job_id in ids.items():
        try:
            backend.get_result(job_id)
        except compat.TaskResultDoesNotExist:
            pass
        except BaseException as exc:
            problems.append(f"get_result of {tag} raised {type(exc).__name__}: {exc}"[:300])
        try:
            asyncio.run(backend.aget_result(job_id))
        except compat.TaskResultDoesNotExist:
            pass
        except BaseException as exc:
            problems.append(f"aget_result of {tag} raised {type(exc).__name__}: {exc}"[:300])


@settings(
    max_examples=examples(100),
    suppress_health_check=SUPPRESS,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(corruptions=st.lists(CORRUPTIONS, min_size=1, max_size=4))
def test_whatever_a_result_holds_get_result_reads_it_or_says_it_does_not_exist(
    fresh: Callable[[], None], corruptions: list[tuple[Any, ...]]
) -> None:
    fresh()
    raw = raw_redis()
    ids = plant(raw)
    for corruption in corruptions:
        apply(raw, ids, corruption)
    problems: list[str] = []
    read_each(ids, problems)
    if NEVER_IMPORTED in sys.modules:
        problems.append(f"reading a result imported {NEVER_IMPORTED}")
    raw.close()
    assert not problems, "\n".join(dict.fromkeys(problems))
