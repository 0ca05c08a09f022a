"""The "Delayed jobs" entry of the admin: a ModelAdmin on the table-less DelayedJob model whose
changelist is the dashboard, with the job lists, job pages, actions and the Schedules page
added by get_urls; and the "Periodic schedules" entry beside it, whose changelist is that
Schedules page.

A queue name is a path segment of those URLs. The names ``.`` and ``..`` are valid queue
names, but browsers (and proxies) remove such dot segments from a path before sending it, so
they travel as ``~.`` and ``~..`` (``~`` is no character of a queue name)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, register_converter, reverse

from delayqueue.admin import limit_pages as limit_views
from delayqueue.admin import pages as views
from delayqueue.admin import schedule_pages as schedule_views
from delayqueue.models import DelayedJob, PeriodicSchedule


class QueueNameInPath:
    """A queue name as one path segment that no browser rewrites: ``.`` and ``..`` go as
    ``~.`` and ``~..``; anything else as itself (the view says when it is no queue)."""

    regex = "[^/]+"
    _DOTS = (".", "..")

    def to_python(self, value: str) -> str:
        if value.startswith("~") and value[1:] in self._DOTS:
            return value[1:]
        return value

    def to_url(self, value: str) -> str:
        return f"~{value}" if value in self._DOTS else value


register_converter(QueueNameInPath, "delayqueue_queue")


class SeenWithViewJobs(admin.ModelAdmin):
    """An entry of the admin index for those with ``delayqueue.view_jobs``; nothing to add,
    change or delete through the model (the pages' own actions check their permissions)."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("delayqueue.view_jobs")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(PeriodicSchedule)
class PeriodicScheduleAdmin(SeenWithViewJobs):
    """The admin index's "Periodic schedules": its only URL leads to the Schedules page (which
    lives beside the dashboard, where its breadcrumbs and links have always pointed)."""

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(reverse("admin:delayqueue_delayedjob_schedules"))

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        return [path("", wrap(self.changelist_view), name="delayqueue_periodicschedule_changelist")]


@admin.register(DelayedJob)
class DelayedJobAdmin(SeenWithViewJobs):
    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return views.dashboard(request, self.admin_site)

    def job_list_view(self, request: HttpRequest, queue: str, state: str) -> HttpResponse:
        return views.job_list(request, self.admin_site, queue, state)

    def job_detail_view(self, request: HttpRequest, queue: str, job_id: str) -> HttpResponse:
        return views.job_detail(request, self.admin_site, queue, job_id)

    def act_view(self, request: HttpRequest, queue: str) -> HttpResponse:
        return views.act(request, self.admin_site, queue)

    def schedules_view(self, request: HttpRequest) -> HttpResponse:
        return schedule_views.schedule_list(request, self.admin_site)

    def schedule_act_view(self, request: HttpRequest) -> HttpResponse:
        return schedule_views.schedule_act(request, self.admin_site)

    def limits_view(self, request: HttpRequest) -> HttpResponse:
        return limit_views.limit_list(request, self.admin_site)

    def get_urls(self) -> list[URLPattern]:
        wrap = self.admin_site.admin_view
        name = "delayqueue_delayedjob"
        return [
            path("", wrap(self.changelist_view), name=f"{name}_changelist"),
            path("schedules/", wrap(self.schedules_view), name=f"{name}_schedules"),
            path("schedules/act/", wrap(self.schedule_act_view), name=f"{name}_schedule_act"),
            path("limits/", wrap(self.limits_view), name=f"{name}_limits"),
            path("<delayqueue_queue:queue>/actions/", wrap(self.act_view), name=f"{name}_act"),
            path(
                "<delayqueue_queue:queue>/job/<str:job_id>/",
                wrap(self.job_detail_view),
                name=f"{name}_job",
            ),
            path(
                "<delayqueue_queue:queue>/<str:state>/",
                wrap(self.job_list_view),
                name=f"{name}_list",
            ),
        ]
