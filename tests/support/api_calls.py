"""Hypothesis strategies for the fuzzing of the public API: one call of it with drawn
arguments (``api_calls``), on a job that exists before the call or none (``make_prior``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery import Celery
from hypothesis import strategies as st

import delayqueue
from delayqueue.engine.keys import new_job_id
from delayqueue.producer.api import Job
from delayqueue.worker.loop import DelayWorker
from tests.support import jobs
from tests.support.api_options import ODD, VALID, VALID_ARGS, VALID_KWARGS, task_of
from tests.support.api_values import ARGS, KWARGS, VALUES, build
from tests.support.corrupt import (
    take_messages,
)


@dataclass
class Prior:
    """A job that exists before the call (to keep, replace, cancel or reschedule)."""

    job: Job
    key: str | None


def make_prior(state: str | None, key: str | None, parked: Celery) -> Prior | None:
    if state is None:
        return None
    job = jobs.record.delay_for("prior", seconds=0 if state == "inflight" else 600, key=key,
                                on_commit=False)  # fmt: skip
    if state == "inflight":
        worker = DelayWorker([job.queue], celery_app=parked)
        try:
            worker.run_pass()
        finally:
            worker.close()
        take_messages()
    return Prior(job, key)


def job_id_of(choice: Any, prior: Prior | None) -> Any:
    if choice == "unknown":
        return new_job_id()
    if prior is None:
        return choice if choice not in ("prior", "prior-lower", "prior\n") else new_job_id()
    return {
        "prior": prior.job.id,
        "prior-lower": prior.job.id.lower(),
        "prior\n": prior.job.id + "\n",
    }.get(choice, choice)


Call = tuple[str, Callable[[], Any]]


def api_call(draw: st.DrawFn, prior: Prior | None) -> Call:
    """One call of the public API with drawn arguments, as (description, thunk): one or two
    kinds of argument (or none) drawn odd, the others valid."""
    odd = draw(st.sets(st.sampled_from([*ODD, "timing"]), max_size=2), "odd arguments")

    def pick(name: str) -> Any:
        return draw(ODD[name] if name in odd else VALID[name], name)

    def timing() -> tuple[Any, Any]:
        """(delay, eta): exactly one of them, unless timing is odd."""
        which = draw(
            st.sampled_from(
                ["delay", "eta", "both", "neither"] if "timing" in odd else ["delay", "eta"]
            )  # fmt: skip
        )
        delay = pick("delay") if which in ("delay", "both") else None
        eta = pick("eta") if which in ("eta", "both") else None
        return delay, eta

    def plain_args() -> Any:
        return draw(ARGS if "args" in odd else VALID_ARGS, "args")

    def plain_kwargs() -> Any:
        return draw(KWARGS if "kwargs" in odd else VALID_KWARGS, "kwargs")

    kind = draw(
        st.sampled_from(
            [
                "delay_for",
                "delay_until",
                "task.delay_many",
                "enqueue",
                "spec",
                "delay_many",
                "cancel",
                "task.cancel",
                "reschedule",
                "task.reschedule",
            ]  # fmt: skip
        ),
        "kind",
    )
    if kind == "delay_for":
        args, kwargs = plain_args(), plain_kwargs()
        delays, key, conflict = pick("delay names"), pick("key"), pick("on_conflict")
        return (
            f"record.delay_for(*{args!r}, **{delays!r}, key={key!r}, on_conflict={conflict!r}, "
            f"on_commit=False, **{kwargs!r})",
            lambda: jobs.record.delay_for(
                *build(args), **build(delays), key=key, on_conflict=conflict, on_commit=False,
                **build(kwargs),
            ),
        )  # fmt: skip
    if kind == "delay_until":
        args, kwargs = plain_args(), plain_kwargs()
        eta, key, conflict = pick("eta"), pick("key"), pick("on_conflict")
        return (
            f"record.delay_until(*{args!r}, eta={eta!r}, key={key!r}, "
            f"on_conflict={conflict!r}, on_commit=False, **{kwargs!r})",
            lambda: jobs.record.delay_until(
                *build(args), eta=eta, key=key, on_conflict=conflict, on_commit=False,
                **build(kwargs),
            ),
        )  # fmt: skip
    if kind == "task.delay_many":
        one = (
            st.one_of(ARGS, ARGS.map(tuple), VALUES, st.sampled_from([{"order_id": 7}]))
            if "args" in odd
            else st.one_of(VALID_ARGS, VALID_ARGS.map(tuple))
        )
        calls = draw(st.lists(one, max_size=4), "calls")
        delays = pick("delay names")
        return (
            f"record.delay_many({calls!r}, **{delays!r}, on_commit=False)",
            lambda: jobs.record.delay_many(build(calls), **build(delays), on_commit=False),
        )
    if kind in ("enqueue", "spec", "delay_many"):
        count = 1 if kind != "delay_many" else draw(st.integers(0, 3), "count")
        specs = []
        for _ in range(count):
            delay, eta = timing()
            options = {
                "delay": delay,
                "eta": eta,
                "queue": pick("queue"),
                "key": pick("key"),
                "on_conflict": pick("on_conflict"),
                "max_attempts": pick("max_attempts"),
                "visibility_timeout": pick("visibility_timeout"),
            }
            options = {name: value for name, value in options.items() if value is not None}
            specs.append((pick("task"), pick("args"), pick("kwargs"), options))
        shown = "; ".join(
            f"{kind}({task!r}, {args!r}, {kwargs!r}, **{options!r})"
            for task, args, kwargs, options in specs
        )
        if kind == "enqueue":
            task, args, kwargs, options = specs[0]
            return shown + ", on_commit=False", lambda: delayqueue.enqueue(
                task_of(task), build(args), build(kwargs), **build(options), on_commit=False
            )
        if kind == "spec":
            task, args, kwargs, options = specs[0]
            return shown, lambda: delayqueue.spec(
                task_of(task), build(args), build(kwargs), **build(options)
            )
        junk: Any = draw(st.sampled_from([None, {"task": "x"}, "spec"]) if "args" in odd
                    else st.none(), "junk spec")  # fmt: skip
        shown = f"delay_many([{shown}]{' + [' + repr(junk) + ']' if junk else ''})"

        def many() -> Any:
            built = [
                delayqueue.spec(task_of(t), build(a), build(k), **build(o)) for t, a, k, o in specs
            ]
            return delayqueue.delay_many(built + ([junk] if junk else []), on_commit=False)

        return shown, many
    by_key = draw(st.booleans(), "by key")
    if "job id" in odd and draw(st.booleans(), "both id and key"):
        job_id, key = job_id_of(pick("job id"), prior), pick("key")
    elif by_key:
        job_id, key = None, (prior.key if prior and prior.key and "key" not in odd
                             else pick("key"))  # fmt: skip
    else:
        job_id, key = job_id_of(pick("job id"), prior), None
    if kind == "cancel":
        queue = pick("queue") or "tests"
        return (
            f"cancel({queue!r}, {job_id!r}, key={key!r})",
            lambda: delayqueue.cancel(queue, job_id, key=key),
        )
    if kind == "task.cancel":
        return (
            f"record.cancel({job_id!r}, key={key!r})",
            lambda: jobs.record.cancel(job_id, key=key),
        )
    if kind == "reschedule":
        queue = pick("queue") or "tests"
        delay, eta = timing()
        return (
            f"reschedule({queue!r}, {job_id!r}, key={key!r}, delay={delay!r}, eta={eta!r})",
            lambda: delayqueue.reschedule(queue, job_id, key=key, delay=build(delay), eta=eta),
        )
    delay, eta = timing()
    delays = pick("delay names") if eta is None else {}
    return (
        f"record.reschedule({job_id!r}, key={key!r}, **{delays!r}, eta={eta!r})",
        lambda: jobs.record.reschedule(job_id, key=key, **build(delays), eta=eta),
    )


@st.composite
def api_calls(draw: st.DrawFn, prior: Prior | None) -> Call:
    return api_call(draw, prior)
