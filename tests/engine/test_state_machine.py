"""The job state machine, checked against a model: Hypothesis drives enqueue / cancel /
reschedule / claim / begin / ack / fail / reap / requeue / purge in random order against the
real Redis and compares every state (zsets, dedupe hash, attempts, tokens, leftover keys)
with a plain Python model.

Real time passes between steps, so due times are either "now" (delay 0) or two hours away,
and visibility deadlines either already passed (0 ms) or an hour away: every claim and reap
is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import delayqueue
from delayqueue.engine.clients import redis_now_ms
from delayqueue.engine.execution import get_scripts
from delayqueue.engine.keys import STATS_TTL_SECONDS, current_minute, global_keys, queue_keys
from delayqueue.engine.packing import SPEC_FIELDS
from tests.support import jobs
from tests.support.data_redis import delayqueue_redis
from tests.support.fuzzing import examples
from tests.support.stored import packed_specs, stored_job

Q = "sm"
FAR_S = 2 * 3600
HOUR_MS = 3600 * 1000
DEFAULT_MAX = 5

State = Literal["scheduled", "inflight", "dead"]


@dataclass
class ModelJob:
    state: State
    due_now: bool = True  # scheduled: due now (True) or in hours; inflight: deadline passed
    att: int = 0
    tok: int = 0
    max: int = DEFAULT_MAX
    key: str | None = None
    began: bool = False  # the current dispatch's task started (begin with its token)


keys_st = st.sampled_from(["k1", "k2", "k3"])
pick = st.integers(min_value=0, max_value=10**6)


class JobStateMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.redis = delayqueue_redis()
        self.keys = queue_keys(Q)
        self.jobs: dict[str, ModelJob] = {}
        self.dedupe: dict[str, str] = {}
        self.known: list[str] = []  # every id ever created, including removed ones

    @initialize()
    def empty(self) -> None:
        stale = list(self.redis.scan_iter(global_keys().prefix + ":*", count=1000))
        if stale:
            self.redis.delete(*stale)

    # ---- helpers -------------------------------------------------------------------------

    def _pick(self, n: int, state: State | None = None) -> str | None:
        ids = (
            self.known
            if state is None
            else sorted(i for i, j in self.jobs.items() if j.state == state)
        )
        return ids[n % len(ids)] if ids else None

    def _drop_key(self, job_id: str) -> None:
        key = self.jobs[job_id].key
        if key is not None and self.dedupe.get(key) == job_id:
            del self.dedupe[key]

    def _remove(self, job_id: str) -> None:
        self._drop_key(job_id)
        del self.jobs[job_id]

    # ---- client API ----------------------------------------------------------------------

    @rule(
        key=st.none() | keys_st,
        replace=st.booleans(),
        far=st.booleans(),
        max_attempts=st.integers(min_value=1, max_value=3),
    )
    def enqueue(self, key: str | None, replace: bool, far: bool, max_attempts: int) -> None:
        job = delayqueue.enqueue(
            jobs.record,
            ["x"],
            delay=FAR_S if far else 0,
            queue=Q,
            key=key,
            on_conflict="replace" if replace else "keep",
            max_attempts=max_attempts,
            on_commit=False,
        )
        existing = self.dedupe.get(key) if key is not None else None
        if existing is not None and self.jobs[existing].state == "scheduled":
            assert job.id == existing
            if not replace:
                assert (job.outcome, job.state) == ("kept", "scheduled")
                return
            assert (job.outcome, job.state) == ("replaced", "scheduled")
            old = self.jobs[existing]
            old.due_now, old.max = not far, max_attempts  # att and tok survive a replace
            return
        if existing is not None and self.jobs[existing].state == "inflight" and not replace:
            assert (job.id, job.outcome, job.state) == (existing, "kept", "inflight")
            return
        assert job.outcome == "created" and job.id not in self.jobs
        self.jobs[job.id] = ModelJob("scheduled", due_now=not far, max=max_attempts, key=key)
        self.known.append(job.id)
        if key is not None:
            self.dedupe[key] = job.id

    @precondition(lambda self: self.known)
    @rule(n=pick, by_key=st.booleans(), key=keys_st)
    def cancel(self, n: int, by_key: bool, key: str) -> None:
        if by_key:
            removed = delayqueue.cancel(Q, key=key)
            target = self.dedupe.get(key)
        else:
            target = self._pick(n)
            removed = delayqueue.cancel(Q, target)
        expected = target in self.jobs and self.jobs[target].state == "scheduled"
        assert removed == expected
        if expected:
            assert target is not None
            self._remove(target)

    @precondition(lambda self: self.known)
    @rule(n=pick, by_key=st.booleans(), key=keys_st, far=st.booleans())
    def reschedule(self, n: int, by_key: bool, key: str, far: bool) -> None:
        delay = FAR_S if far else 0
        if by_key:
            job = delayqueue.reschedule(Q, key=key, delay=delay)
            target = self.dedupe.get(key)
        else:
            target = self._pick(n)
            job = delayqueue.reschedule(Q, target, delay=delay)
        if target is None or target not in self.jobs or self.jobs[target].state != "scheduled":
            assert job is None
            return
        assert job is not None and job.id == target
        self.jobs[target].due_now = not far

    # ---- worker and Celery side (the scripts) --------------------------------------------

    @rule(expired=st.booleans())
    def claim(self, expired: bool) -> None:
        k = self.keys
        reply = get_scripts().claim(
            [
                k.scheduled,
                k.inflight,
                k.job_prefix,
                k.paused,
                k.stats(current_minute()),
                k.dead,
                k.spec_prefix,
                k.limit_prefix,
                k.dedupe,
                k.tasks,
            ],
            [1000, 0 if expired else HOUR_MS, STATS_TTL_SECONDS, 0],
        )
        claimed = {str(c[0]): (int(c[1]), int(c[2])) for c in reply[4]}
        due = {i for i, j in self.jobs.items() if j.state == "scheduled" and j.due_now}
        assert set(claimed) == due
        for job_id in due:
            job = self.jobs[job_id]
            job.state, job.due_now, job.began = "inflight", expired, False
            job.tok += 1
            job.att += 1
            assert claimed[job_id] == (job.tok, job.att)

    @precondition(lambda self: self.known)
    @rule(n=pick, stale=st.booleans())
    def begin(self, n: int, stale: bool) -> None:
        job_id = self._pick(n)
        assert job_id is not None
        job = self.jobs.get(job_id)
        token = (job.tok if job else 1) - (1 if stale else 0)
        reply = get_scripts().begin(
            [self.keys.job(job_id), self.keys.inflight], [job_id, token, HOUR_MS]
        )
        if job is not None and job.state == "inflight" and str(token) == str(job.tok):
            assert reply[:2] == [1, job.att]
            job.due_now = False  # deadline restarted: an hour from now
            job.began = True
        else:
            assert reply == [0]

    def _token(self, job_id: str, stale: bool) -> str:
        job = self.jobs.get(job_id)
        return str((job.tok if job else 1) - (1 if stale else 0))

    @precondition(lambda self: self.known)
    @rule(n=pick, stale=st.booleans())
    def ack(self, n: int, stale: bool) -> None:
        job_id = self._pick(n)
        assert job_id is not None
        token = self._token(job_id, stale)
        k = self.keys
        acked = get_scripts().ack(
            [k.job(job_id), k.inflight, k.scheduled, k.dedupe, k.stats(current_minute()), k.dead],
            [job_id, token, STATS_TTL_SECONDS],
        )
        job = self.jobs.get(job_id)
        # The fencing token decides: the run that holds the current token finished, so the
        # job is done, wherever a reap put it meanwhile (back to scheduled, or even dead).
        expected = job is not None and job.tok > 0 and token == str(job.tok)
        assert acked == (1 if expected else 0)
        if expected:
            self._remove(job_id)

    @precondition(lambda self: self.known)
    @rule(n=pick, stale=st.booleans(), backoff_far=st.booleans())
    def fail(self, n: int, stale: bool, backoff_far: bool) -> None:
        job_id = self._pick(n)
        assert job_id is not None
        token = self._token(job_id, stale)
        k = self.keys
        outcome = get_scripts().fail(
            [k.job(job_id), k.inflight, k.scheduled, k.dead, k.dedupe,
             k.stats(current_minute()), k.job_prefix],
            [job_id, token, HOUR_MS * 2 if backoff_far else 0, "ValueError: boom", "tb",
             DEFAULT_MAX, 100_000, STATS_TTL_SECONDS, k.wake],
        )  # fmt: skip
        job = self.jobs.get(job_id)
        if job is None or job.tok == 0 or token != str(job.tok):
            assert outcome == "stale"
            return
        if job.att >= job.max:
            assert outcome == "dead"
            self._drop_key(job_id)
            job.state = "dead"
        else:
            assert outcome == "retry"
            job.state, job.due_now = "scheduled", not backoff_far

    @rule()
    def reap(self) -> None:
        k = self.keys
        back, dead = get_scripts().reap(
            [k.inflight, k.scheduled, k.dead, k.job_prefix, k.dedupe], [1000, DEFAULT_MAX]
        )
        expired = [i for i, j in self.jobs.items() if j.state == "inflight" and j.due_now]
        # A task that started used its attempt; a dispatch that never started did not.
        model_dead = [
            i for i in expired if self.jobs[i].began and self.jobs[i].att >= self.jobs[i].max
        ]
        assert (back, dead) == (len(expired) - len(model_dead), len(model_dead))
        for job_id in expired:
            job = self.jobs[job_id]
            if job_id in model_dead:
                self._drop_key(job_id)
                job.state = "dead"
            else:
                if not job.began:
                    job.att = max(0, job.att - 1)
                job.state, job.due_now = "scheduled", True

    @precondition(lambda self: self.known)
    @rule(n=pick, far=st.booleans())
    def requeue(self, n: int, far: bool) -> None:
        job_id = self._pick(n)
        assert job_id is not None
        k = self.keys
        done = get_scripts().requeue(
            [k.job(job_id), k.dead, k.scheduled, k.dedupe],
            [job_id, HOUR_MS * 2 if far else 0, k.wake],
        )
        job = self.jobs.get(job_id)
        if job is None or job.state != "dead":
            assert done == 0
            return
        assert done == 1
        job.state, job.due_now, job.att = "scheduled", not far, 0
        if job.key is not None:
            self.dedupe.setdefault(job.key, job_id)

    @precondition(lambda self: self.known)
    @rule(ns=st.lists(pick, min_size=1, max_size=3))
    def purge_ids(self, ns: list[int]) -> None:
        ids = sorted({i for i in (self._pick(n) for n in ns) if i is not None})
        k = self.keys
        purged = get_scripts().purge([k.dead, k.job_prefix], ["ids", *ids])
        dead = [i for i in ids if i in self.jobs and self.jobs[i].state == "dead"]
        assert purged == len(dead)
        for job_id in dead:
            del self.jobs[job_id]

    @rule()
    def purge_all_dead(self) -> None:
        dead = [i for i, j in self.jobs.items() if j.state == "dead"]
        k = self.keys
        purged = get_scripts().purge([k.dead, k.job_prefix], ["oldest", len(dead) + 1])
        assert purged == len(dead)
        for job_id in dead:
            del self.jobs[job_id]

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def redis_equals_model(self) -> None:
        k = self.keys
        now_ms = redis_now_ms(self.redis)
        zsets: dict[str, dict[str, float]] = {}
        for state, name in (
            ("scheduled", k.scheduled),
            ("inflight", k.inflight),
            ("dead", k.dead),
        ):
            pairs: list[tuple[str, float]] = self.redis.zrange(name, 0, -1, withscores=True)  # type: ignore[assignment]
            zsets[state] = dict(pairs)
            model = {i for i, j in self.jobs.items() if j.state == state}
            assert set(zsets[state]) == model, state
            assert self.redis.zcard(name) == len(model)
        assert self.redis.hgetall(k.dedupe) == self.dedupe
        # No job hash or packed spec without a job, no job without one of them; only a
        # scheduled job has a packed spec, and a spec's fields live in one place.
        hashes = {key[len(k.job_prefix) :] for key in self.redis.scan_iter(k.job_prefix + "*")}
        specs = {str(i) for i in packed_specs(self.redis, k)}
        assert hashes | specs == set(self.jobs)
        assert {i for i in specs if self.jobs[i].state != "scheduled"} == set()
        for job_id, job in self.jobs.items():
            if job_id in specs:
                assert not set(self.redis.hkeys(k.job(job_id))) & set(SPEC_FIELDS)
            fields = stored_job(self.redis, k, job_id)
            assert int(fields.get("att", 0)) == job.att and int(fields.get("tok", 0)) == job.tok
            assert fields.get("key") == job.key
            if job.state == "scheduled":
                # due now: already due; far: more than an hour away
                assert (zsets["scheduled"][job_id] <= now_ms) == job.due_now
            if job.state == "inflight":
                assert (zsets["inflight"][job_id] <= now_ms) == job.due_now


JobStateMachine.TestCase.settings = settings(max_examples=examples(200), stateful_step_count=50)


TestJobStateMachine = pytest.mark.fuzz(JobStateMachine.TestCase)
