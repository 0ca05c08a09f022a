"""The admin's Schedules page: every periodic schedule with its rule (as written and in
words), timezone, next runs, last run and its outcome, and whether it is paused; pause,
resume (``delayqueue.pause_schedules``) and run now (``delayqueue.run_schedules``) as POSTs
with Django's CSRF check, each followed by a message and a redirect back."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.views.decorators.http import require_POST

from delayqueue.admin.pages import NotFound, _render, _require, _url, guarded
from delayqueue.errors import CorruptSchedule
from delayqueue.services import schedules

ACTS = {"pause": "pause_schedules", "resume": "pause_schedules", "run_now": "run_schedules"}


@guarded
def schedule_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    _require(request, "view_jobs")
    user = request.user
    return _render(
        request,
        site,
        "schedules.html",
        "Periodic schedules",
        schedules=schedules.all_schedules(),
        can_pause=user.has_perm("delayqueue.pause_schedules"),
        can_run=user.has_perm("delayqueue.run_schedules"),
    )


@require_POST
@guarded
def schedule_act(request: HttpRequest, site: AdminSite) -> HttpResponse:
    action = request.POST.get("action", "")
    if action not in ACTS:
        raise NotFound(f"“{action[:100]}” is not an action on schedules.")
    _require(request, ACTS[action])
    name = request.POST.get("name", "")[:300]
    if schedules.find(name) is None:
        raise NotFound(f"There is no schedule named “{name[:100]}”.")
    try:
        done, text = _act(action, name)
    except CorruptSchedule as exc:  # its record cannot be acted on: the page says why
        messages.add_message(request, messages.ERROR, f"{exc}.")
    else:
        messages.add_message(request, messages.SUCCESS if done else messages.WARNING, text)
    return HttpResponseRedirect(_url("schedules"))


def _act(action: str, name: str) -> tuple[bool, str]:
    if action == "pause":
        done = schedules.pause(name)
        return done, f"Schedule {name} paused." if done else f"Schedule {name} was paused already."
    if action == "resume":
        done = schedules.resume(name)
        return done, f"Schedule {name} resumed." if done else f"Schedule {name} was not paused."
    job_id = schedules.run_now(name)
    if job_id is None:
        return False, f"Schedule {name}: no job to run (its task and arguments are not stored)."
    return True, f"Schedule {name}: job {job_id} runs now."
