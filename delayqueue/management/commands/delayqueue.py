"""``python manage.py delayqueue ACTION``: see queues and workers, check health, and act on
jobs and queues from a shell. Exit codes: 0 done, 1 failed (Redis, a job not in the state the
action needs, unhealthy, declined), 2 usage error (see delayqueue/cli/__init__.py)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from delayqueue.cli import FAILED, USAGE, acts, render, status
from delayqueue.cli import limits as limits_cli
from delayqueue.cli import schedules as schedule_cli
from delayqueue.engine.keys import check_job_id
from delayqueue.errors import DelayQueueError, InvalidJobId, InvalidQueueName
from delayqueue.services import limits as limits_service
from delayqueue.services import schedules as schedules_service


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds >= 0")
    return seconds


def _positive_seconds(value: str) -> float:
    seconds = _seconds(value)
    if seconds == 0:
        raise argparse.ArgumentTypeError("the interval must be more than 0 seconds")
    return seconds


def _count(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number >= 1")
    return int(value)


class Command(BaseCommand):
    help = (
        "See delayqueue's queues and workers (status, show, health) and act on them (cancel, "
        "requeue-dead, purge-dead, pause, resume; each asks first unless --yes). Exit codes: "
        "0 done, 1 failed or unhealthy, 2 usage error."
    )
    stealth_options = ("stdin",)

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        p = actions.add_parser("status", help="queues (counts, next due, rates) and live workers")
        p.add_argument("--json", action="store_true", help="print JSON (one line per refresh)")
        p.add_argument("--queue", "-q", action="append", help="only this queue (repeatable)")
        p.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
        p.add_argument(
            "--interval", type=_positive_seconds, default=2.0, help="seconds between refreshes"
        )
        p.add_argument("--iterations", type=_count, help="with --watch: stop after N refreshes")

        p = actions.add_parser("show", help="everything Redis holds about one job")
        p.add_argument("job", metavar="JOB", help="job id")
        p.add_argument("--queue", "-q", help="the job's queue (default: look in every queue)")
        p.add_argument("--json", action="store_true", help="print JSON")

        p = actions.add_parser("health", help="exit 1 when a queue is not being served")
        p.add_argument(
            "--max-overdue",
            type=_seconds,
            default=status.DEFAULT_MAX_OVERDUE,
            metavar="S",
            help="seconds the oldest due job of a queue may wait (default %(default)g)",
        )
        p.add_argument("--queue", "-q", action="append", help="only this queue (repeatable)")
        p.add_argument("--json", action="store_true", help="print JSON")

        p = actions.add_parser("cancel", help="remove scheduled jobs")
        p.add_argument("jobs", nargs="+", metavar="JOB", help="job ids")
        p.add_argument("--queue", "-q", help="the jobs' queue (default: look in every queue)")
        self._yes(p)

        for name, verb in (
            ("requeue-dead", "run dead jobs again now"),
            ("purge-dead", "delete dead jobs"),
        ):
            p = actions.add_parser(name, help=f"{verb} (all of the queue, or the JOBs given)")
            p.add_argument("queue", metavar="QUEUE")
            p.add_argument("jobs", nargs="*", metavar="JOB", help="job ids (default: all)")
            self._yes(p)

        p = actions.add_parser("pause", help="stop workers claiming from a queue")
        p.add_argument("queue", metavar="QUEUE")
        p.add_argument("--note", default="paused with manage.py delayqueue pause")
        self._yes(p)

        p = actions.add_parser("resume", help="let workers claim from a paused queue again")
        p.add_argument("queue", metavar="QUEUE")
        self._yes(p)

        p = actions.add_parser("schedules", help="periodic schedules: list, pause, resume, run-now")
        p.add_argument(
            "verb", nargs="?", default="list", choices=["list", "pause", "resume", "run-now"]
        )
        p.add_argument("name", nargs="?", metavar="NAME", help="the schedule (not for list)")
        p.add_argument("--json", action="store_true", help="list: print JSON")
        self._yes(p)

        p = actions.add_parser("limits", help="limited tasks: rate, concurrency, expiry, state")
        p.add_argument("--json", action="store_true", help="print JSON")

    @staticmethod
    def _yes(parser: CommandParser) -> None:
        parser.add_argument("--yes", "-y", action="store_true", help="do not ask to confirm")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdin: TextIO = options.get("stdin") or sys.stdin
        action = options["action"]
        try:
            if action == "status":
                self.status(options)
            elif action == "show":
                self.show(options["job"], options["queue"], as_json=options["json"])
            elif action == "health":
                self.health(options)
            elif action == "schedules":
                self.schedules(options)
            elif action == "limits":
                found = limits_service.limited_tasks()
                said = (
                    [json.dumps([limits_cli.as_json(t) for t in found], indent=2)]
                    if options["json"]
                    else limits_cli.lines(found)
                )
                for line in said:
                    self.stdout.write(line)
            else:
                self.act(self.plan(action, options), yes=options["yes"])
        except acts.Refused as exc:
            raise CommandError(str(exc), returncode=exc.code) from None
        except (InvalidQueueName, InvalidJobId) as exc:
            raise CommandError(str(exc), returncode=USAGE) from None
        except DelayQueueError as exc:
            if options.get("json"):
                # a reader of --json gets JSON whatever happened (Redis down, a refused
                # password): the error, its kind, and the exit code that follows
                failure = {"error": str(exc), "kind": type(exc).__name__, "exit_code": FAILED}
                self.stdout.write(json.dumps(failure))
            raise CommandError(str(exc), returncode=FAILED) from None

    # ---- reading -----------------------------------------------------------------------

    def status(self, options: dict[str, Any]) -> None:
        only = status.check_queues(options["queue"])
        out = render.console(getattr(self.stdout, "_out", sys.stdout))  # the stream itself
        if not options["watch"]:
            snap = status.snapshot(only)
            if options["json"]:
                self.stdout.write(json.dumps(render.status_json(snap), indent=2))
            else:
                out.print(render.status_tables(snap))
            return
        failed = self.watch(only, options, out)
        if failed:
            raise CommandError(failed, returncode=FAILED)

    def watch(self, only: list[str] | None, options: dict[str, Any], out: Any) -> str:
        """Refresh until Ctrl-C (or ``--iterations``); the last refresh's error, if any."""
        done, error = 0, ""
        try:
            while True:
                try:
                    snap = status.snapshot(only)
                    error = ""
                except DelayQueueError as exc:
                    snap, error = None, str(exc)
                if options["json"]:
                    shown = render.status_json(snap) if snap else {"error": error}
                    self.stdout.write(json.dumps(shown))
                else:
                    if out.is_terminal:
                        out.clear()
                    stamp = time.strftime("%H:%M:%S")
                    out.print(
                        f"delayqueue status at {stamp}, every {options['interval']:g} s "
                        "(Ctrl-C to stop)"
                    )
                    out.print(render.status_tables(snap) if snap else f"error: {error}")
                self.stdout.flush()
                done += 1
                if options["iterations"] and done >= options["iterations"]:
                    return error
                time.sleep(options["interval"])
        except KeyboardInterrupt:
            return ""

    def show(self, job_id: str, queue: str | None, *, as_json: bool) -> None:
        from delayqueue.services.job_detail import job_detail

        check_job_id(job_id)
        queues = [acts.known_queue(queue)] if queue is not None else None
        places = status.locate(job_id, queues)
        if not places:
            raise acts.Refused(acts.not_found(job_id, queue))
        for place in places:
            job = job_detail(place.queue, job_id)
            if job is None:  # gone between the two reads
                raise acts.Refused(acts.not_found(job_id, place.queue))
            if as_json:
                self.stdout.write(json.dumps(render.job_json(job), indent=2))
            else:
                self.say(render.job_text(job))

    def health(self, options: dict[str, Any]) -> None:
        verdict = status.health(
            status.snapshot(status.check_queues(options["queue"])), options["max_overdue"]
        )
        if options["json"]:
            self.stdout.write(json.dumps(render.health_json(verdict), indent=2))
        else:
            for line in render.health_lines(verdict):
                self.say(line)
        if not verdict.ok:
            problems = verdict.problems + [
                f"queue {q.name}: {p}" for q in verdict.queues for p in q.problems
            ]
            raise CommandError("unhealthy: " + "; ".join(problems), returncode=FAILED)

    def schedules(self, options: dict[str, Any]) -> None:
        verb, name = options["verb"], options["name"]
        if verb == "list":
            if name:
                raise CommandError("schedules list takes no NAME", returncode=USAGE)
            views = schedules_service.all_schedules()
            if options["json"]:
                self.stdout.write(json.dumps([schedule_cli.as_json(v) for v in views], indent=2))
            else:
                for line in schedule_cli.lines(views):
                    self.say(line)
            return
        if not name:
            raise CommandError(f"schedules {verb} needs the schedule's NAME", returncode=USAGE)
        if verb != "resume" and not options["yes"]:
            self.confirm(f"{verb} schedule {name}?")
        done, said = schedule_cli.act(verb, name)
        if not done:
            raise CommandError(render.escaped(said), returncode=FAILED)
        self.say(said)

    # ---- acting ------------------------------------------------------------------------

    def plan(self, action: str, options: dict[str, Any]) -> acts.Plan:
        if action == "cancel":
            return acts.plan_cancel(options["jobs"], options["queue"])
        if action == "requeue-dead":
            return acts.plan_requeue_dead(options["queue"], options["jobs"])
        if action == "purge-dead":
            return acts.plan_purge_dead(options["queue"], options["jobs"])
        if action == "pause":
            return acts.plan_pause(options["queue"], options["note"])
        return acts.plan_resume(options["queue"])

    def act(self, plan: acts.Plan, *, yes: bool) -> None:
        for line in plan.said:
            self.say(line)
        if not plan.question:
            return
        for problem in plan.problems:
            self.stderr.write(render.escaped(f"skipped: {problem}"))
        if not yes:
            self.confirm(plan.question)
        outcome = plan.run()
        for line in outcome.said:
            self.say(line)
        if outcome.problems:
            raise CommandError(render.escaped("; ".join(outcome.problems)), returncode=FAILED)

    def say(self, text: str) -> None:
        """A line of text on stdout, with what it took from Redis escaped."""
        self.stdout.write(render.escaped(text))

    def confirm(self, question: str) -> None:
        if not self.stdin.isatty():
            raise CommandError(
                f'not confirmed: "{question}" needs an answer and stdin is not a terminal; '
                "pass --yes to go ahead",
                returncode=USAGE,
            )
        self.stderr.write(f"{question} [y/N] ", ending="")
        self.stderr.flush()
        try:
            answer = self.stdin.readline()
        except KeyboardInterrupt:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("not confirmed: nothing was changed", returncode=FAILED)
