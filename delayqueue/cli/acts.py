"""The command line's actions, each in two steps: ``plan_*`` checks the arguments and reads
what the action would touch (refusing early, with the reason, when nothing can be done), and
gives the question to confirm; ``Plan.run`` acts through ``delayqueue.services.operations`` and
reports per job what applied and what had moved on in the meantime."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from delayqueue.cli import FAILED, USAGE
from delayqueue.cli.status import Place, locate
from delayqueue.engine.keys import check_job_id, check_queue_name
from delayqueue.services import browse, operations
from delayqueue.services.job_detail import job_detail


class Refused(Exception):
    """The action cannot go ahead: the message says why, ``code`` is the exit code."""

    def __init__(self, message: str, code: int = FAILED) -> None:
        super().__init__(message)
        self.code = code


@dataclass
class Outcome:
    said: list[str] = field(default_factory=list)  # what was done, for stdout
    problems: list[str] = field(default_factory=list)  # what was not: exit code 1


@dataclass
class Plan:
    question: str  # "" when there is nothing to do (``said`` says so)
    run: Callable[[], Outcome]
    said: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # jobs already known to be left out


def _nothing(message: str) -> Plan:
    return Plan("", Outcome, said=[message])


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def known_queue(queue: str) -> str:
    """A well-formed name of a queue that exists (known or holding jobs), or Refused (2)."""
    check_queue_name(queue)
    if not browse.queue_exists(queue):
        known = browse.known_queues()
        listed = ", ".join(known) if known else "none yet"
        raise Refused(f"unknown queue {queue!r} (known queues: {listed})", USAGE)
    return queue


def _ids(ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(check_job_id(i) for i in ids))


def describe(queue: str, job_id: str) -> str:
    """``job ID (task, key K)`` for questions and reports."""
    job = job_detail(queue, job_id)
    if job is None:
        return f"job {job_id}"
    extra = [job.task] if job.task else []
    if job.key:
        extra.append(f"key {job.key[:80]}")
    return f"job {job_id} ({', '.join(extra)})" if extra else f"job {job_id}"


def _elsewhere(job_id: str, place: Place, wanted: str, hint: str) -> str:
    shown = {"scheduled": "scheduled", "inflight": "in flight", "dead": "dead"}
    if place.state is None:
        return (
            f"job {job_id} of queue {place.queue} is in no list right now (moving between "
            "states, or its data was left behind); try again"
        )
    return f"job {job_id} of queue {place.queue} is {shown[place.state]}, not {wanted}{hint}"


def not_found(job_id: str, queue: str | None) -> str:
    if queue is not None:
        return f"no job {job_id} in queue {queue}"
    return f"no job {job_id} in any known queue (it may have run already; or pass --queue)"


# ---- cancel -----------------------------------------------------------------------------


def plan_cancel(ids: Sequence[str], queue: str | None = None) -> Plan:
    """Scheduled jobs -> gone. Jobs in flight or dead are refused, with what to do instead."""
    wanted = _ids(ids)
    queues = [known_queue(queue)] if queue is not None else None
    problems: list[str] = []
    targets: dict[str, list[str]] = {}
    hints = {
        "inflight": " (it runs now or soon; cancel removes scheduled jobs only)",
        "dead": " (delete it with: delayqueue purge-dead QUEUE JOB)",
    }
    for job_id in wanted:
        places = locate(job_id, queues)
        if not places:
            problems.append(not_found(job_id, queue))
        for place in places:
            if place.state == "scheduled":
                targets.setdefault(place.queue, []).append(job_id)
            else:
                hint = hints.get(place.state or "", "").replace("QUEUE", place.queue)
                problems.append(_elsewhere(job_id, place, "scheduled", hint.replace("JOB", job_id)))
    if not targets:
        raise Refused("; ".join(problems))
    count = sum(len(v) for v in targets.values())
    if count == 1:
        (target_queue, (job_id,)) = next(iter(targets.items()))
        question = f"Cancel {describe(target_queue, job_id)} of queue {target_queue}?"
    else:
        question = f"Cancel {plural(count, 'scheduled job')} of queue {', '.join(targets)}?"

    def run() -> Outcome:
        outcome = Outcome(problems=list(problems))
        for target_queue, job_ids in targets.items():
            result = operations.cancel(target_queue, job_ids)
            outcome.said += [f"cancelled job {i} of queue {target_queue}" for i in result.done]
            outcome.problems += [
                f"job {i} of queue {target_queue} was no longer scheduled (it was dispatched, "
                "cancelled or changed meanwhile)"
                for i in result.missed
            ]
        return outcome

    return Plan(question, run, problems=problems)


# ---- dead jobs ----------------------------------------------------------------------------


def _dead_ids(queue: str, ids: Sequence[str], hint: str) -> tuple[list[str], list[str]]:
    """(ids that are dead in ``queue``, a problem for each one that is not)."""
    dead, problems = [], []
    for job_id in _ids(ids):
        places = locate(job_id, [queue])
        if not places:
            problems.append(not_found(job_id, queue))
        elif places[0].state == "dead":
            dead.append(job_id)
        else:
            problems.append(_elsewhere(job_id, places[0], "dead", hint))
    if not dead:
        raise Refused("; ".join(problems))
    return dead, problems


def _unrunnable(count: int, queue: str) -> str:
    return (
        f"{plural(count, 'dead job')} of queue {queue} stay dead: their data cannot run "
        "(see delayqueue show JOB; purge-dead removes them)"
    )


def plan_requeue_dead(queue: str, ids: Sequence[str] = ()) -> Plan:
    """Dead jobs (``ids``, or all of the queue) -> scheduled, due now, attempts reset."""
    known_queue(queue)
    if not ids:
        count = browse.count(queue, "dead")
        if not count:
            return _nothing(f"queue {queue} has no dead jobs; nothing to requeue")

        def run_all() -> Outcome:
            result = operations.retry_all_dead(queue)
            outcome = Outcome(said=[f"requeued {plural(result.done, 'dead job')} of queue {queue}"])
            if result.unrunnable:
                outcome.problems.append(_unrunnable(result.unrunnable, queue))
            return outcome

        question = (
            f"Requeue {plural(count, 'dead job')} of queue {queue} (due now, attempts reset)?"
        )
        return Plan(question, run_all)

    dead, problems = _dead_ids(queue, ids, "")

    def run() -> Outcome:
        result = operations.retry_dead(queue, dead)
        outcome = Outcome(problems=list(problems))
        outcome.said += [f"requeued job {i} of queue {queue}" for i in result.done]
        outcome.problems += [f"job {i} of queue {queue} is no longer dead" for i in result.missed]
        if result.unrunnable:
            outcome.problems.append(
                f"{', '.join(result.unrunnable)}: " + _unrunnable(len(result.unrunnable), queue)
            )
        return outcome

    return Plan(
        _question("Requeue", queue, dead, " (due now, attempts reset)"), run, problems=problems
    )


def plan_purge_dead(queue: str, ids: Sequence[str] = ()) -> Plan:
    """Dead jobs (``ids``, or all of the queue) -> gone, with their data."""
    known_queue(queue)
    if not ids:
        count = browse.count(queue, "dead")
        if not count:
            return _nothing(f"queue {queue} has no dead jobs; nothing to purge")

        def run_all() -> Outcome:
            result = operations.purge_all_dead(queue)
            return Outcome(said=[f"purged {plural(result.done, 'dead job')} of queue {queue}"])

        return Plan(f"Purge {plural(count, 'dead job')} of queue {queue}?", run_all)

    dead, problems = _dead_ids(queue, ids, " (purge-dead deletes dead jobs only)")

    def run() -> Outcome:
        result = operations.delete_dead(queue, dead)
        outcome = Outcome(problems=list(problems))
        outcome.said += [f"purged job {i} of queue {queue}" for i in result.done]
        outcome.problems += [f"job {i} of queue {queue} is no longer dead" for i in result.missed]
        return outcome

    return Plan(_question("Purge", queue, dead, ""), run, problems=problems)


def _question(verb: str, queue: str, ids: list[str], tail: str) -> str:
    if len(ids) == 1:
        return f"{verb} dead {describe(queue, ids[0])} of queue {queue}{tail}?"
    return f"{verb} {plural(len(ids), 'dead job')} of queue {queue}{tail}?"


# ---- queues -------------------------------------------------------------------------------


def plan_pause(queue: str, note: str) -> Plan:
    """Workers stop claiming from the queue; in-flight jobs finish."""
    known_queue(queue)
    if operations.is_paused(queue):
        return _nothing(f"queue {queue} is already paused")
    scheduled = browse.count(queue, "scheduled")

    def run() -> Outcome:
        if operations.pause(queue, note):
            return Outcome(said=[f"paused queue {queue}"])
        return Outcome(said=[f"queue {queue} was already paused"])

    return Plan(
        f"Pause queue {queue} ({plural(scheduled, 'scheduled job')} wait until it is resumed)?",
        run,
    )


def plan_resume(queue: str) -> Plan:
    """Workers claim from the queue again, woken at once."""
    known_queue(queue)
    if not operations.is_paused(queue):
        return _nothing(f"queue {queue} is not paused")
    scheduled = browse.count(queue, "scheduled")

    def run() -> Outcome:
        if operations.resume(queue):
            return Outcome(said=[f"resumed queue {queue}"])
        return Outcome(said=[f"queue {queue} was no longer paused"])

    return Plan(f"Resume queue {queue} ({plural(scheduled, 'scheduled job')})?", run)
