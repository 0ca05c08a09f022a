"""The Lua scripts against corrupt data and bad arguments, on the suite's Redis.

Every script validates every field it reads before its first write and orders its writes so
that an error part-way cannot lose a job (docs/design.md, "Rules every script keeps"). Here
each script runs on a small world of jobs in every state after one field of one job (or one
structure) was corrupted, and afterwards every job must be accounted for: in exactly one of
scheduled, in flight and dead, or gone because the script's very purpose was to remove it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from typing import Any, Literal

import pytest
import redis

import delayqueue
from delayqueue.conf import WAKE_HORIZON_MS
from delayqueue.engine.execution import get_scripts
from delayqueue.engine.keys import STATS_TTL_SECONDS, current_minute, queue_keys
from delayqueue.engine.packing import pack
from tests.support import jobs
from tests.support.corrupt import keys_of_the_test
from tests.support.stored import packed_specs

Q = queue_keys("h")
STATS = Q.stats(current_minute())
TASK = "tests.support.jobs.record"
# The bytes client. redis-py types its replies as ``str | bytes``; here they are bytes.
Raw = Any


@pytest.fixture
def raw(r: redis.Redis) -> Iterator[Raw]:
    """The suite's Redis as bytes (corrupt data need not be UTF-8); empty at the start."""
    client = redis.Redis(port=int(os.environ["DQ_TEST_REDIS_PORT"]), socket_timeout=10)
    yield client
    client.close()


def run(name: str, keys: list[Any], args: list[Any], client: Raw) -> Any:
    return getattr(get_scripts(), name)(keys, args, client=client)


# ---- each transition, as its callers call it ------------------------------------------------


def enqueue(c: Raw, job_id: str, delay_ms: int = 0, key: str = "",
            conflict: str = "keep", max_attempts: str = "3", vt: str = "") -> Any:  # fmt: skip
    spec = pack(TASK, '["x"]', "", max_attempts, vt, key)
    keys = [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix]
    return run("enqueue", keys, ["w", WAKE_HORIZON_MS, job_id, "delay", delay_ms, key,
                                 conflict, spec, ""], c)[0]  # fmt: skip


CLAIM_KEYS = [
    Q.scheduled,
    Q.inflight,
    Q.job_prefix,
    Q.paused,
    STATS,
    Q.dead,
    Q.spec_prefix,
    Q.limit_prefix,
    Q.dedupe,
    Q.tasks,
]


def claim(c: Raw, visibility_ms: int = 60_000) -> Any:
    keys = CLAIM_KEYS
    return run("claim", keys, [1000, visibility_ms, STATS_TTL_SECONDS, 0], c)


def reap(c: Raw) -> Any:
    return run("reap", [Q.inflight, Q.scheduled, Q.dead, Q.job_prefix, Q.dedupe], [1000, 3], c)


def begin(c: Raw, job_id: str, token: Any) -> Any:
    return run("begin", [Q.job(job_id), Q.inflight], [job_id, token, 60_000], c)


def ack(c: Raw, job_id: str, token: Any, *extra: str) -> Any:
    keys = [Q.job(job_id), Q.inflight, Q.scheduled, Q.dedupe, STATS, Q.dead, *extra]
    return run("ack", keys, [job_id, token, STATS_TTL_SECONDS], c)


def fail(c: Raw, job_id: str, token: Any, *extra: str, max_attempts: int = 3) -> Any:
    keys = [Q.job(job_id), Q.inflight, Q.scheduled, Q.dead, Q.dedupe, STATS, Q.job_prefix,
            *extra]  # fmt: skip
    args = [job_id, token, 0, "ValueError: b\xe4d \udcff".encode("utf-8", "surrogateescape"),
            b"tb \xff", max_attempts, 100_000, STATS_TTL_SECONDS, Q.wake]  # fmt: skip
    return run("fail", keys, args, c)


def release(c: Raw, job_id: str, token: Any) -> Any:
    keys = [Q.job(job_id), Q.inflight, Q.scheduled]
    return run("release", keys, [job_id, token, 0, 1, b"broker \xff down", Q.wake], c)


def bury(c: Raw, job_id: str) -> Any:
    keys = [
        Q.job(job_id),
        Q.inflight,
        Q.scheduled,
        Q.dead,
        Q.dedupe,
        STATS,
        Q.spec_prefix,
        Q.limit_prefix,
        Q.tasks,
    ]
    return run("bury", keys, [job_id, b"unknown task \xff", STATS_TTL_SECONDS], c)


def cancel(c: Raw, job_id: str, key: str = "") -> Any:
    return run("cancel", [Q.scheduled, Q.dedupe, Q.job_prefix, Q.spec_prefix], [job_id, key], c)


def reschedule(c: Raw, job_id: str, mode: str = "delay", ms: Any = 0) -> Any:
    return run("reschedule", [Q.scheduled, Q.dedupe], [job_id, "", mode, ms, Q.wake], c)


def requeue(c: Raw, job_id: str) -> Any:
    return run("requeue", [Q.job(job_id), Q.dead, Q.scheduled, Q.dedupe], [job_id, 0, Q.wake], c)


def purge(c: Raw, job_id: str) -> Any:
    return run("purge", [Q.dead, Q.job_prefix], ["ids", job_id], c)


def text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


# ---- the regression of the flaky state machine ----------------------------------------------


def _enqueue_k(max_attempts: int, replace: bool = False) -> delayqueue.Job:
    conflict: Literal["keep", "replace"] = "replace" if replace else "keep"
    return delayqueue.enqueue(
        jobs.record, ["x"], delay=0, queue="h", key="k", on_conflict=conflict,
        max_attempts=max_attempts, on_commit=False,
    )  # fmt: skip


@pytest.mark.parametrize("outcome", ["fail", "ack"])
def test_replace_of_a_job_back_from_a_failure_keeps_its_spec_in_its_hash(
    raw: Raw, outcome: str
) -> None:
    job_id = _enqueue_k(max_attempts=2).id
    token = claim(raw)[4][0][1]
    assert text(fail(raw, job_id, token, max_attempts=5)) == "retry"
    replaced = _enqueue_k(max_attempts=1, replace=True)
    assert (replaced.id, replaced.outcome) == (job_id, "replaced")
    stored = {text(k): text(v) for k, v in raw.hgetall(Q.job(job_id)).items()}
    assert {stored.get(f) for f in ("task", "key", "max")} == {TASK, "k", "1"}
    assert packed_specs(raw, Q) == {}  # one place for a spec: the hash, once it exists
    if outcome == "fail":  # with the still-current token: its one attempt is used up
        assert text(fail(raw, job_id, token, max_attempts=5)) == "dead"
        assert raw.zscore(Q.dead, job_id) is not None
        assert text(raw.hget(Q.job(job_id), "why")) == "failed 1 of 1 attempts"
    else:
        assert ack(raw, job_id, token) == 1
        assert not raw.exists(Q.job(job_id))
    assert raw.hlen(Q.dedupe) == 0 and packed_specs(raw, Q) == {}
    assert raw.zcard(Q.scheduled) == 0


def _both(raw: Raw) -> tuple[str, Any]:
    """A job back from a failure whose replacing spec was written beside its hash (planted:
    hash without spec fields, spec in its specs bucket)."""
    enqueue(raw, "A", key="k", max_attempts="2")
    token = claim(raw)[4][0][1]
    assert fail(raw, "A", token) == b"retry"
    raw.hdel(Q.job("A"), "task", "args", "max", "key")
    raw.hset(Q.job("A"), "kwargs", '{"stale":1}')
    raw.hset(Q.spec_bucket("A"), "A", pack(TASK, '["new"]', "", "1", "", "k"))
    return "A", token


def test_a_job_with_a_hash_and_a_packed_spec_is_settled_by_ack(raw: Raw) -> None:
    job_id, token = _both(raw)
    assert ack(raw, job_id, token, Q.spec_prefix) == 1
    assert raw.hlen(Q.dedupe) == 0 and packed_specs(raw, Q) == {}
    assert not raw.exists(Q.job("A"))


def test_a_job_with_a_hash_and_a_packed_spec_is_settled_by_fail(raw: Raw) -> None:
    job_id, token = _both(raw)
    assert fail(raw, job_id, token, Q.spec_prefix) == b"dead"  # the spec's max (1), not 3
    assert raw.hlen(Q.dedupe) == 0 and packed_specs(raw, Q) == {}
    assert raw.hget(Q.job("A"), "args") == b'["new"]'


def test_claim_of_a_job_with_a_hash_and_a_packed_spec_takes_the_spec(raw: Raw) -> None:
    _both(raw)
    jobs_ = claim(raw)[4]
    assert [(j[0], j[4], j[5]) for j in jobs_] == [(b"A", b'["new"]', b"")]
    assert raw.hget(Q.job("A"), "kwargs") is None and packed_specs(raw, Q) == {}


# ---- the known cases ------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["vt", "rp"])
@pytest.mark.parametrize("value", ["nan", "inf", "1e400", "abc"])
def test_claim_loses_no_job_when_one_field_is_corrupt(raw: Raw, field: str, value: str) -> None:
    for i in range(20):
        enqueue(raw, f"J{i:02}")
    if field == "vt":
        enqueue(raw, "BAD", vt=value)
    else:  # a job back from a failure: its hash holds rp
        enqueue(raw, "BAD")
        token = claim(raw)[4][0][1]
        fail(raw, "BAD", token)
        raw.hset(Q.job("BAD"), "rp", value)
        raw.zadd(Q.scheduled, {f"J{i:02}": 0 for i in range(20)})
    claimed = [j[0] for j in claim(raw)[4]]
    assert claimed == [f"J{i:02}".encode() for i in range(20)]
    assert raw.zcard(Q.inflight) == 20 and raw.zcard(Q.scheduled) == 0
    assert raw.zscore(Q.dead, "BAD") is not None
    assert b"corrupt job data" in (raw.hget(Q.job("BAD"), "why") or b"")


def test_a_job_dispatched_ten_times_that_never_started_goes_to_dead(raw: Raw) -> None:
    """A dispatch that never starts (a message the Celery worker cannot decode and drops,
    or one lost again and again) is given back nine times, then the job is dead."""
    enqueue(raw, "A", key="k")
    for dispatch in range(1, 11):
        assert [j[0] for j in claim(raw, visibility_ms=1000)[4]] == [b"A"]
        raw.zadd(Q.inflight, {"A": 0})  # its deadline passes; no task ever began
        assert reap(raw) == ([1, 0] if dispatch < 10 else [0, 1])
    assert raw.zscore(Q.dead, "A") is not None and raw.zcard(Q.scheduled) == 0
    assert raw.hget(Q.job("A"), "why") == b"dispatched 10 times and never started"
    assert raw.hlen(Q.dedupe) == 0
    assert requeue(raw, "A") == 1 and raw.hget(Q.job("A"), "rp") is None  # a fresh count


@pytest.mark.parametrize("ms", ["abc", "nan", "inf", "-inf", "1e300", "", "-1"])
def test_enqueue_with_a_bad_ms_writes_nothing(raw: Raw, ms: str) -> None:
    good = pack(TASK, "[]", "", "", "", "")
    keys = [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix]
    args = ["w", WAKE_HORIZON_MS, "A", "delay", 0, "k", "keep", good, "",
            "B", "delay", ms, "", "keep", good, ""]  # fmt: skip
    with pytest.raises(redis.ResponseError):
        run("enqueue", keys, args, raw)
    assert keys_of_the_test(raw) == []


@pytest.mark.parametrize(
    "args",
    [
        ["w", WAKE_HORIZON_MS, "A", "soon", 0, "", "keep", pack(TASK, "[]"), ""],
        ["w", WAKE_HORIZON_MS, "A", "delay", 0, "", "merge", pack(TASK, "[]"), ""],
        ["w", WAKE_HORIZON_MS, "A", "delay", 0, "", "keep", "not a spec", ""],
        ["w", WAKE_HORIZON_MS, "", "delay", 0, "", "keep", pack(TASK, "[]"), ""],
        ["w", WAKE_HORIZON_MS, "A", "at", -1e15, "", "keep", pack(TASK, "[]"), ""],
        ["w", "nan", "A", "delay", 0, "", "keep", pack(TASK, "[]"), ""],
        ["w", WAKE_HORIZON_MS, "A", "delay", 0, "", "keep", pack(TASK, "[]")],
        ["w", WAKE_HORIZON_MS, "A", "delay", 0, "", "keep", pack(TASK, "[]"), "x\n1\n1\n0\n"],
        ["w", WAKE_HORIZON_MS, "A", "delay", 0, "", "keep", pack(TASK, "[]"), "\n0\n1000\n0\n"],
    ],
)
def test_enqueue_with_bad_arguments_writes_nothing(raw: Raw, args: list[Any]) -> None:
    keys = [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix]
    with pytest.raises(redis.ResponseError):
        run("enqueue", keys, args, raw)
    assert keys_of_the_test(raw) == []


def test_enqueue_sent_again_after_its_job_was_claimed_writes_no_second_copy(
    raw: Raw,
) -> None:
    enqueue(raw, "A", key="k")
    claim(raw)
    reply = enqueue(raw, "A", key="k")
    assert (reply[0], reply[2], reply[3]) == (b"A", b"created", b"inflight")
    assert raw.zcard(Q.scheduled) == 0 and packed_specs(raw, Q) == {}


def enqueue_both(c: Raw, *job_ids: str) -> Any:
    """One call that enqueues each of ``job_ids`` (keyless, due now)."""
    args: list[Any] = ["w", WAKE_HORIZON_MS]
    for job_id in job_ids:
        args += [job_id, "delay", 0, "", "keep", pack(TASK, "[]"), ""]
    return run("enqueue", [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix],
               args, c)  # fmt: skip


# What one enqueue call reads or writes: (setup, the call, the keys it uses, its outcome).
ENQUEUE_CASES: dict[str, tuple[Callable[[Raw], Any], Callable[[Raw], Any], set[str], bytes]] = {
    "one job": (lambda c: None, lambda c: enqueue(c, "A"), {"scheduled", "bucket"}, b"created"),
    "one job with a key": (
        lambda c: None,
        lambda c: enqueue(c, "A", key="k"),
        {"scheduled", "dedupe", "bucket"},
        b"created",
    ),
    "sent again after its claim": (
        lambda c: (enqueue(c, "A"), claim(c)),
        lambda c: enqueue(c, "A"),
        {"scheduled", "inflight"},
        b"created",
    ),
    "keep of a running job": (
        lambda c: (enqueue(c, "B", key="k"), claim(c)),
        lambda c: enqueue(c, "A", key="k"),
        {"scheduled", "dedupe", "inflight"},
        b"kept",
    ),
    "a batch": (
        lambda c: None,
        lambda c: enqueue_both(c, "B", "A")[1],
        {"scheduled", "inflight", "dedupe", "bucket"},
        b"created",
    ),  # fmt: skip
}
ENQUEUE_KEYS = {"scheduled": (Q.scheduled, "zset"), "inflight": (Q.inflight, "zset"),
                "dedupe": (Q.dedupe, "hash"), "bucket": (f"{Q.spec_prefix}A", "hash")}  # fmt: skip


@pytest.mark.parametrize("case", list(ENQUEUE_CASES))
@pytest.mark.parametrize("structure", list(ENQUEUE_KEYS))
def test_enqueue_fails_on_a_key_of_the_wrong_type_it_uses_before_any_write(
    raw: Raw, case: str, structure: str
) -> None:
    """One job checks a key when it uses it, a batch every key first: a key of the wrong
    type that the call uses fails it with wrong_type's error and nothing written; one it
    does not use stops nothing."""
    setup, call, uses, outcome = ENQUEUE_CASES[case]
    setup(raw)
    key, want = ENQUEUE_KEYS[structure]
    raw.delete(key)
    raw.set(key, b"planted")
    before = snapshot(raw)
    if structure in uses:
        message = f"WRONGTYPE delayqueue: {key} is a string, not a {want}"
        with pytest.raises(redis.ResponseError, match=f"^{re.escape(message)}$"):
            call(raw)
        assert snapshot(raw) == before
    else:
        assert call(raw)[2] == outcome


@pytest.mark.parametrize("ms", ["abc", "nan", "inf", "1e300"])
def test_reschedule_with_a_bad_ms_changes_nothing(raw: Raw, ms: str) -> None:
    enqueue(raw, "A", 60_000)
    before = raw.zscore(Q.scheduled, "A")
    with pytest.raises(redis.ResponseError):
        reschedule(raw, "A", "delay", ms)
    with pytest.raises(redis.ResponseError):
        reschedule(raw, "A", "at", ms)
    assert raw.zscore(Q.scheduled, "A") == before


@pytest.mark.parametrize("score", [float("inf"), 1e300])
def test_a_due_time_after_year_9999_goes_to_dead(raw: Raw, score: float) -> None:
    enqueue(raw, "A")
    enqueue(raw, "B")
    raw.zadd(Q.scheduled, {"A": score})
    now, next_due, *_ = claim(raw)
    assert raw.zscore(Q.dead, "A") is not None and raw.zscore(Q.inflight, "B") is not None
    assert next_due == -1
    assert b"after year 9999" in (raw.hget(Q.job("A"), "why") or b"")


def test_a_deadline_after_year_9999_is_reaped(raw: Raw) -> None:
    enqueue(raw, "A")
    claim(raw)
    raw.zadd(Q.inflight, {"A": float("inf")})
    assert reap(raw) == [1, 0] and raw.zscore(Q.scheduled, "A") is not None


@pytest.mark.parametrize(
    "hist",
    [b"[" * 3000, b"[1e999]", b'{"a":1}', b"x" * 200_000, b"\xff\xfe", b"[" + b"1," * 50 + b"1]"],
)
def test_a_history_that_cannot_be_kept_starts_afresh(raw: Raw, hist: bytes) -> None:
    enqueue(raw, "A")
    token = claim(raw)[4][0][1]
    raw.hset(Q.job("A"), "hist", hist)
    assert fail(raw, "A", token) == b"retry"
    kept = json.loads(raw.hget(Q.job("A"), "hist") or b"")
    assert isinstance(kept, list) and 1 <= len(kept) <= 20
    assert kept[-1]["outcome"] == "failed"


def test_a_claim_batch_larger_than_lua_can_unpack(raw: Raw) -> None:
    for start in range(0, 9000, 500):
        keys = [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix]
        args: list[Any] = ["w", WAKE_HORIZON_MS]
        for i in range(start, start + 500):
            args += [f"J{i:05}", "delay", 0, "", "keep", pack(TASK, "[]"), ""]
        run("enqueue", keys, args, raw)
    assert len(run("claim", CLAIM_KEYS, [9000, 60_000, STATS_TTL_SECONDS, 0], raw)[4]) == 9000
    assert raw.zcard(Q.inflight) == 9000 and raw.zcard(Q.scheduled) == 0


# ---- every script, every field it reads, every way to corrupt it ----------------------------

# The world: a job in every state.
#   S1 scheduled, due, never claimed (a packed spec), key k1
#   S2 scheduled, due, back from a failure (a hash), key k2
#   S3 scheduled in an hour, never claimed
#   I1 in flight, its task started, deadline passed, key k3
#   I2 in flight, never started, deadline passed
#   D1 dead
WORLD = ("S1", "S2", "S3", "I1", "I2", "D1")
KEY_OF = {"S1": "k1", "S2": "k2", "I1": "k3"}


def build_world(c: Raw) -> dict[str, Any]:
    enqueue(c, "I1", key="k3")
    enqueue(c, "I2")
    enqueue(c, "D1", max_attempts="1")
    enqueue(c, "S2", key="k2")
    enqueue(c, "S3", 3_600_000)
    claim(c)
    tokens: dict[str, Any] = {}
    for job_id in ("I1", "I2", "D1", "S2"):
        tokens[job_id] = c.hget(Q.job(job_id), "tok")
    for job_id in ("I1", "D1", "S2"):
        assert begin(c, job_id, tokens[job_id])[0] == 1
    assert fail(c, "D1", tokens["D1"]) == b"dead"
    assert fail(c, "S2", tokens["S2"]) == b"retry"
    enqueue(c, "S1", key="k1")
    c.zadd(Q.inflight, {"I1": 0, "I2": 0})
    c.zadd(Q.scheduled, {"S1": 0, "S2": 0})
    return tokens


def snapshot(c: Raw) -> dict[bytes, bytes | None]:
    return {key: c.dump(key) for key in keys_of_the_test(c)}


def restore(c: Raw, saved: dict[bytes, bytes | None]) -> None:
    pipe = c.pipeline(transaction=False)
    pipe.flushdb()
    for key, value in saved.items():
        if value is not None:
            pipe.restore(key, 0, value)
    pipe.execute()


VALUES: list[bytes | None] = [None, b"", b"abc", b"nan", b"inf", b"-inf", b"1e308", b"9" * 30,
                              b"-1", b"1.5", b"\xff\xfe\x00"]  # fmt: skip
HASH_FIELDS = ("task", "args", "kwargs", "max", "vt", "key", "tok", "att", "rp", "began",
               "hist", "why")  # fmt: skip
HIST_VALUES = [b"[" * 3000, b"[1e999]", b'{"a":1}', b"x" * 100_000]
FOREIGN = {
    "string": lambda c, k: c.set(k, b"\x80\x04planted"),
    "list": lambda c, k: c.rpush(k, b"a"),
    "set": lambda c, k: c.sadd(k, b"a"),
    "zset": lambda c, k: c.zadd(k, {b"a": 1}),
}
SPEC_PARTS = ("task", "args", "kwargs", "max", "vt", "key")


def corruptions(job_id: str) -> Iterator[tuple[str, Callable[[redis.Redis], Any]]]:
    """(description, how) for every corruption of job ``job_id`` the tests try."""
    job = Q.job(job_id)
    if job_id in ("S1", "S3"):  # a packed spec
        for i, part in enumerate(SPEC_PARTS):
            for value in VALUES:

                def set_part(c: Raw, i: int = i, value: bytes | None = value) -> None:
                    parts = (c.hget(Q.spec_bucket(job_id), job_id) or b"").split(b"\n", 5)
                    parts[i] = (value or b"").replace(b"\n", b"")
                    c.hset(Q.spec_bucket(job_id), job_id, b"\n".join(parts))

                yield f"spec {part}={value!r}", set_part
        for spec in (b"abc", b"\xff\n\xfe", b"\n\n\n\n\n", b"a\nb\nc"):

            def set_spec(c: Raw, spec: bytes = spec) -> None:
                c.hset(Q.spec_bucket(job_id), job_id, spec)

            yield f"spec={spec!r}", set_spec
    else:
        for field in HASH_FIELDS:
            for value in VALUES + (HIST_VALUES if field == "hist" else []):

                def set_field(c: Raw, field: str = field, value: bytes | None = value) -> None:
                    if value is None:
                        c.hdel(job, field)
                    else:
                        c.hset(job, field, value)

                yield f"{field}={(value or b'<missing>')[:20]!r}", set_field
        yield "hash missing", lambda c: c.delete(job)
    for kind, make in FOREIGN.items():

        def foreign(c: Raw, make: Any = make) -> None:
            c.delete(job)
            make(c, job)

        yield f"job key is a {kind}", foreign

        def foreign_bucket(c: Raw, make: Any = make) -> None:
            c.delete(Q.spec_bucket(job_id))
            make(c, Q.spec_bucket(job_id))

        yield f"specs bucket is a {kind}", foreign_bucket
    zset = {"S": Q.scheduled, "I": Q.inflight, "D": Q.dead}[job_id[0]]
    for score in (float("inf"), float("-inf"), 1e300, -1e300):

        def set_score(c: Raw, score: float = score) -> None:
            c.zadd(zset, {job_id: score})

        yield f"score {score}", set_score
    if job_id in KEY_OF:
        key = KEY_OF[job_id]
        yield "dedupe entry to a missing job", lambda c: c.hset(Q.dedupe, key, b"GHOST")
        yield "dedupe entry not UTF-8", lambda c: c.hset(Q.dedupe, key, b"\xff")


# (name, call(client, target, token) -> ids the call rightly removed)
Action = Callable[[redis.Redis, str, Any], set[str]]


def _removed_if(ok: bool, job_id: str) -> set[str]:
    return {job_id} if ok else set()


ACTIONS: dict[str, Action] = {
    "claim": lambda c, j, t: (claim(c), set())[1],
    "reap": lambda c, j, t: (reap(c), set())[1],
    "begin": lambda c, j, t: (begin(c, j, t), set())[1],
    "ack": lambda c, j, t: _removed_if(ack(c, j, t, Q.spec_prefix) == 1, j),
    "fail": lambda c, j, t: (fail(c, j, t, Q.spec_prefix), set())[1],
    "release": lambda c, j, t: (release(c, j, t), set())[1],
    "bury": lambda c, j, t: (bury(c, j), set())[1],
    "cancel": lambda c, j, t: _removed_if(cancel(c, j)[0] == 1, j),
    "cancel by key": lambda c, j, t: (
        {text(reply[1])} if (reply := cancel(c, "", KEY_OF.get(j, "kx")))[0] == 1 else set()
    ),
    "reschedule": lambda c, j, t: (reschedule(c, j), set())[1],
    "requeue": lambda c, j, t: (requeue(c, j), set())[1],
    "purge": lambda c, j, t: _removed_if(purge(c, j) == 1, j),
    "enqueue replace": lambda c, j, t: (
        enqueue(c, "N1", key=KEY_OF.get(j, "kx"), conflict="replace"),
        set(),
    )[1],
    "enqueue keep": lambda c, j, t: (enqueue(c, "N1", key=KEY_OF.get(j, "kx")), set())[1],
}


def has_spec(c: Raw, job_id: bytes) -> bool:
    """Whether a packed spec of the job is in its bucket (a bucket that is not a hash holds
    none)."""
    try:
        return bool(c.hexists(Q.spec_bucket(job_id), job_id))
    except redis.ResponseError:
        return False


def unaccounted(c: Raw, removed: set[str], dead_before: set[bytes]) -> list[str]:
    """What is wrong with the jobs in Redis: a job in no zset or in several, a removed job
    that left data behind, a job newly dead without a reason."""
    zsets = {name: set(c.zrange(key, 0, -1)) for name, key in
             (("scheduled", Q.scheduled), ("inflight", Q.inflight), ("dead", Q.dead))}  # fmt: skip
    ids = {i.encode() for i in WORLD} | {b"N1"}
    problems = []
    for job_id in sorted(ids):
        where = [name for name, members in zsets.items() if job_id in members]
        has_data = c.exists(Q.job(job_id.decode())) or has_spec(c, job_id)
        if job_id.decode() in removed or (job_id == b"N1" and not where and not has_data):
            if where or has_data:
                problems.append(f"{job_id!r} removed but still in {where} or has data")
        elif len(where) != 1:
            problems.append(f"{job_id!r} is in {where}")
        elif where == ["dead"] and job_id not in dead_before:
            why = (
                c.hget(Q.job(job_id.decode()), "why")
                if c.type(Q.job(job_id.decode())) == b"hash"
                else None
            )
            if not why:
                problems.append(f"{job_id!r} went to dead without a reason")
    for job_id in set().union(*zsets.values()) - ids:
        problems.append(f"unknown member {job_id!r}")
    return problems


@pytest.mark.parametrize("action", list(ACTIONS))
def test_no_corruption_of_a_job_makes_a_script_fail_or_lose_a_job(raw: Raw, action: str) -> None:
    """For each job of the world and each corruption of it: the action on that job, then a
    claim and a reap (the worker's next pass) all answer, and every job is accounted for."""
    tokens = build_world(raw)
    world = snapshot(raw)
    failures: list[str] = []
    tried = 0
    for target in WORLD:
        for what, corrupt in corruptions(target):
            restore(raw, world)
            corrupt(raw)
            removed: set[str] = set()
            dead_before = set(raw.zrange(Q.dead, 0, -1))
            step = action
            try:
                removed = ACTIONS[action](raw, target, tokens.get(target, b"1"))
                problems = unaccounted(raw, removed, dead_before)
                for step in ("claim", "reap"):
                    if raw.zcard(Q.inflight):
                        raw.zadd(Q.inflight, {m: 0 for m in raw.zrange(Q.inflight, 0, -1)})
                    dead_before = set(raw.zrange(Q.dead, 0, -1))
                    ACTIONS[step](raw, target, tokens.get(target, b"1"))
                    problems += unaccounted(raw, removed, dead_before)
            except redis.ResponseError as exc:
                problems = [f"{step} raised {exc}"]
            tried += 1
            if problems:
                failures.append(f"{target} {what}: {'; '.join(sorted(set(problems)))}")
    assert tried > 500
    assert not failures, f"{len(failures)} of {tried} cases:\n" + "\n".join(failures[:40])


# A queue's keys. "specs buckets": the bucket of every job of the world (and of N1, the job
# the "enqueue" actions write).
STRUCTURES: dict[str, list[Any]] = {
    "scheduled": [Q.scheduled], "inflight": [Q.inflight], "dead": [Q.dead],
    "dedupe": [Q.dedupe], "specs buckets": [Q.spec_bucket(i) for i in (*WORLD, "N1")],
    "stats": [STATS],
}  # fmt: skip
# Structures that stop no script: the stats counters (worth less than the call); a bucket
# stops only an enqueue whose new spec it would hold.
GOES_ON = {"stats": (), "specs buckets": ("enqueue keep", "enqueue replace")}


@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_a_structure_of_the_wrong_type_fails_a_script_before_any_write(
    raw: Raw, structure: str
) -> None:
    """A queue key of the wrong type: each script either refuses before its first write, or
    (the stats counters, the specs buckets but for the new spec of an enqueue) goes on
    without it."""
    tokens = build_world(raw)
    world = snapshot(raw)
    failures = []
    right = "zset" if structure in ("scheduled", "inflight", "dead") else "hash"
    for kind, make in FOREIGN.items():
        if kind == right:
            continue
        for action in ACTIONS:
            for target in WORLD:
                restore(raw, world)
                for key in STRUCTURES[structure]:
                    raw.delete(key)
                    make(raw, key)
                before = snapshot(raw)
                try:
                    ACTIONS[action](raw, target, tokens.get(target, b"1"))
                except redis.ResponseError as exc:
                    if snapshot(raw) != before:
                        failures.append(f"{kind} {action} {target}: wrote, then raised {exc}")
                    if structure in GOES_ON and action not in GOES_ON[structure]:
                        failures.append(f"{kind} {action} {target}: {structure} stopped it: {exc}")
    assert not failures, "\n".join(failures[:40])


def test_a_specs_bucket_of_the_wrong_type_is_the_problem_of_its_jobs_only(raw: Raw) -> None:
    """A bucket that is not a hash: an enqueue whose new spec it would hold fails with the
    bucket named, writing nothing; a never-claimed job in it goes to dead with a reason at
    its claim (the key left as it is), and cancel removes such a job; every other job runs."""
    for i in range(20):
        enqueue(raw, f"J{i:02}")
    enqueue(raw, "AXY", key="k1")
    enqueue(raw, "BXY", key="k2")
    bucket = f"{Q.spec_prefix}XY"
    assert Q.spec_bucket("AXY") == Q.spec_bucket("BXY") == bucket
    raw.delete(bucket)
    raw.set(bucket, b"\x80\x04planted")
    before = snapshot(raw)
    with pytest.raises(redis.ResponseError, match=r"WRONGTYPE .*:specs:XY is a string"):
        run("enqueue", [Q.scheduled, Q.inflight, Q.dedupe, Q.job_prefix, Q.spec_prefix],
            ["w", WAKE_HORIZON_MS, "N1", "delay", 0, "", "keep", pack(TASK, "[]"), "",
             "CXY", "delay", 0, "", "keep", pack(TASK, "[]"), ""], raw)  # fmt: skip
    assert snapshot(raw) == before
    assert cancel(raw, "", "k2") == [1, b"BXY"] and raw.hget(Q.dedupe, "k2") is None
    claimed = [j[0] for j in claim(raw)[4]]
    assert claimed == [f"J{i:02}".encode() for i in range(20)]
    assert raw.zscore(Q.dead, "AXY") is not None and raw.zcard(Q.scheduled) == 0
    why = raw.hget(Q.job("AXY"), "why") or b""
    assert why == f"corrupt job data: its specs bucket {bucket} is a string, not a hash".encode()
    assert raw.get(bucket) == b"\x80\x04planted"
    assert enqueue(raw, "N1", key="k1")[2] == b"created"  # a dead job keeps no key from it


def test_a_stats_counter_that_is_not_an_integer_stops_nothing(raw: Raw) -> None:
    raw.hset(STATS, mapping={"dispatched": "x", "acked": "nan", "failed": "1e400", "dead": "y"})
    enqueue(raw, "A")
    enqueue(raw, "B", max_attempts="1")
    (a, ta, *_), (b, tb, *_) = claim(raw)[4]
    assert ack(raw, a.decode(), ta) == 1
    assert fail(raw, b.decode(), tb, max_attempts=1) == b"dead"
    assert raw.zscore(Q.dead, "B") is not None


BAD_NUMBERS = ["abc", "nan", "inf", "-inf", "1e400", ""]
# (script, keys, args, index of a numeric argument) as the callers pass them, on the world
NUMERIC_ARGS: list[tuple[str, list[Any], list[Any], int]] = [
    ("claim", CLAIM_KEYS,
     [1000, 60_000, STATS_TTL_SECONDS, 0], 0),
    ("claim", CLAIM_KEYS,
     [1000, 60_000, STATS_TTL_SECONDS, 0], 1),
    ("claim", CLAIM_KEYS,
     [1000, 60_000, STATS_TTL_SECONDS, 0], 3),
    ("reap", [Q.inflight, Q.scheduled, Q.dead, Q.job_prefix, Q.dedupe], [1000, 3], 0),
    ("reap", [Q.inflight, Q.scheduled, Q.dead, Q.job_prefix, Q.dedupe], [1000, 3], 1),
    ("begin", [Q.job("I2"), Q.inflight], ["I2", "TOKEN", 60_000], 2),
    ("fail", [Q.job("I1"), Q.inflight, Q.scheduled, Q.dead, Q.dedupe, STATS, Q.job_prefix],
     ["I1", "TOKEN", 0, "E", "tb", 3, 1000, STATS_TTL_SECONDS, Q.wake], 2),
    ("fail", [Q.job("I1"), Q.inflight, Q.scheduled, Q.dead, Q.dedupe, STATS, Q.job_prefix],
     ["I1", "TOKEN", 0, "E", "tb", 3, 1000, STATS_TTL_SECONDS, Q.wake], 5),
    ("release", [Q.job("I1"), Q.inflight, Q.scheduled], ["I1", "", 0, 1, "r", Q.wake], 2),
    ("requeue", [Q.job("D1"), Q.dead, Q.scheduled, Q.dedupe], ["D1", 0, Q.wake], 1),
    ("purge", [Q.dead, Q.job_prefix], ["oldest", 5], 1),
    ("reschedule", [Q.scheduled, Q.dedupe], ["S1", "", "delay", 0, Q.wake], 3),
]  # fmt: skip


@pytest.mark.parametrize(("name", "keys", "args", "index"), NUMERIC_ARGS)
def test_a_bad_number_from_a_caller_fails_the_call_before_any_write(
    raw: Raw, name: str, keys: list[Any], args: list[Any], index: int
) -> None:
    tokens = build_world(raw)
    args = [tokens.get(args[0], b"1") if a == "TOKEN" else a for a in args]
    before = snapshot(raw)
    for bad in BAD_NUMBERS:
        with pytest.raises(redis.ResponseError):
            run(name, keys, [*args[:index], bad, *args[index + 1 :]], raw)
        assert snapshot(raw) == before, (name, bad)
    run(name, keys, args, raw)  # and with the good number, it runs
