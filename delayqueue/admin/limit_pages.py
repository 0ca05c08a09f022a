"""The admin's Limits page: each task with a rate, a concurrency or an expiry, as declared,
and each of its limits' state now (starts in the current window, jobs running, due jobs
waiting for a slot), with a link to the queue's jobs that died expired. Read only."""

from __future__ import annotations

from django.contrib.admin import AdminSite
from django.http import HttpRequest, HttpResponse

from delayqueue.admin.pages import _render, _require, guarded
from delayqueue.services import limits


@guarded
def limit_list(request: HttpRequest, site: AdminSite) -> HttpResponse:
    _require(request, "view_jobs")
    notes: list[str] = []
    found = limits.limited_tasks(notes)
    return _render(request, site, "limits.html", "Limits", tasks=found, notes=notes)
