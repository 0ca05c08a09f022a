"""The admin pages for delayed jobs: dashboard, job lists, job detail, and one POST endpoint
for every action (with a confirm step for destructive ones, then a message and a redirect).

Each view checks its own permission (``delayqueue.view_jobs`` to see, ``change_jobs`` to act,
``delete_jobs`` to delete and purge); ``admin_site.admin_view`` (see __init__.py) has already sent
anonymous users to the login page. Permissions are checked before Redis is asked anything,
so a user without them learns nothing about which queues exist. Bad input is a 404 with a page
that says what was wrong; Redis down or refusing is a 503 page, with no secret of its URL.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, ParamSpec

from django.contrib import messages
from django.contrib.admin import AdminSite
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from delayqueue.admin.actions import ACTIONS, STATE_LABELS, Action, Call, perform
from delayqueue.conf import get_settings
from delayqueue.engine import presence
from delayqueue.engine.keys import JOB_ID, STATES, State
from delayqueue.engine.redis_errors import as_delayqueue_error
from delayqueue.errors import DelayQueueError, RedisUnavailable
from delayqueue.models import DelayedJob
from delayqueue.redaction import redact
from delayqueue.services import browse, operations
from delayqueue.services import dashboard as dashboard_queries
from delayqueue.services.display import Moment
from delayqueue.services.job_detail import job_detail as read_job

P = ParamSpec("P")
View = Callable[Concatenate[HttpRequest, AdminSite, P], HttpResponse]

# What each list sorts by (the label of its sort menu) and the menu's two directions.
SORT_LABELS: dict[State, str] = {
    "scheduled": "Sort by due time",
    "inflight": "Sort by deadline",
    "dead": "Sort by time of death",
}
ORDER_LABELS: dict[State, dict[browse.Order, str]] = {
    "scheduled": {"asc": "soonest first", "desc": "latest first"},
    "inflight": {"asc": "soonest first", "desc": "latest first"},
    "dead": {"desc": "most recent first", "asc": "longest ago first"},
}
DEFAULT_ORDER: dict[State, browse.Order] = {"scheduled": "asc", "inflight": "asc", "dead": "desc"}
MAX_SEARCH = 200
UNITS = {"seconds": 1, "minutes": 60, "hours": 3600, "days": 86400}


class NotFound(Exception):
    """Bad or unknown input: rendered as a 404 page with this message."""


def _url(name: str, *args: str) -> str:
    return reverse(f"admin:delayqueue_delayedjob_{name}", args=args)


def _render(
    request: HttpRequest,
    site: AdminSite,
    template: str,
    title: str,
    status: int = 200,
    **extra: Any,
) -> TemplateResponse:
    user = request.user
    context = {
        **site.each_context(request),
        "title": title,
        "opts": DelayedJob._meta,
        "app_label": "delayqueue",
        "can_change": user.has_perm("delayqueue.change_jobs"),
        "can_delete": user.has_perm("delayqueue.delete_jobs"),
        **extra,
    }
    return TemplateResponse(request, f"admin/delayqueue/{template}", context, status=status)


def _require(request: HttpRequest, perm: str) -> None:
    if not request.user.has_perm(f"delayqueue.{perm}"):
        raise PermissionDenied(f"you need the permission delayqueue.{perm}")


def shown_error(exc: BaseException) -> str:
    """An error's message as a page may show it: no secret of the Redis URL in any form."""
    try:
        url = str(get_settings().redis_url)
    except Exception:  # settings that cannot even be read: redact URLs in the text alone
        url = ""
    return redact(str(exc), url)


def guarded(view: View[P]) -> View[P]:
    """Turn bad input into a 404 page, and Redis down or refusing (a connection failure or
    any error reply: OOM, READONLY, NOPERM, MISCONF, LOADING...) into a 503 page."""

    @wraps(view)
    def wrapper(request: HttpRequest, site: AdminSite, *args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            return view(request, site, *args, **kwargs)
        except NotFound as exc:
            return _render(request, site, "problem.html", "Not found", 404, problem=str(exc))
        except Exception as raised:
            error = as_delayqueue_error(raised)
            if error is None:
                raise
            if isinstance(error, RedisUnavailable):
                title = "Redis unavailable"
            elif type(error).__name__.startswith("Redis"):  # RedisError and its kinds
                title = "Redis refused the request"
            else:
                title = "Delayed jobs error"
            problem = f"{title}: {shown_error(error)}"
            return _render(request, site, "problem.html", title, 503, problem=problem)

    return wrapper


def _queue(queue: str) -> str:
    if not browse.queue_exists(queue):
        raise NotFound(f"There is no queue named “{queue[:100]}”.")
    return queue


def _state(state: str) -> State:
    for known in STATES:
        if state == known:
            return known
    raise NotFound(
        f"“{state[:100]}” is not a job list; the lists are scheduled, inflight and dead."
    )


def _job_id(job_id: str) -> str:
    if not JOB_ID.fullmatch(job_id.upper()):
        raise NotFound(f"“{job_id[:100]}” is not a job id (a 26-character ULID).")
    return job_id.upper()


# ---- pages ------------------------------------------------------------------------------


@guarded
def dashboard(request: HttpRequest, site: AdminSite) -> HttpResponse:
    _require(request, "view_jobs")
    notes: list[str] = []
    queues = browse.known_queues(notes)
    chart_queue = request.GET.get("chart", "")
    if chart_queue:
        _queue(chart_queue)
    now, rows = dashboard_queries.overview(queues, notes)
    chart = dashboard_queries.due_chart([chart_queue] if chart_queue else queues, notes)
    alive, gone = dashboard_queries.workers(notes)
    return _render(
        request,
        site,
        "dashboard.html",
        "Delayed jobs",
        queues=rows,
        chart=chart,
        chart_queue=chart_queue,
        workers=alive,
        workers_gone=gone,
        handoff=dashboard_queries.handoff_remarks(presence.read_handoff()),
        now=Moment(now, now),
        notes=notes,
    )


def _int_param(request: HttpRequest, name: str, default: int) -> int:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 9:
        raise NotFound(f"?{name}={raw[:100]} is not a page number.")
    return int(raw)


@guarded
def job_list(request: HttpRequest, site: AdminSite, queue: str, state: str) -> HttpResponse:
    _require(request, "view_jobs")
    queue, st = _queue(queue), _state(state)
    order = request.GET.get("order") or DEFAULT_ORDER[st]
    if order not in ("asc", "desc"):
        raise NotFound(f"?order={order[:100]} is not an order; use asc or desc.")
    search, task = request.GET.get("q", ""), request.GET.get("task", "")
    if len(search) > MAX_SEARCH or len(task) > MAX_SEARCH:
        raise NotFound(f"A search is at most {MAX_SEARCH} characters.")
    page_number = _int_param(request, "page", 1)
    try:
        page = browse.job_page(
            queue,
            st,
            page=page_number,
            order="asc" if order == "asc" else "desc",
            search=search,
            task=task,
            reason=request.GET.get("reason", "")[:MAX_SEARCH],
        )
    except browse.PageOutOfRange as exc:
        raise NotFound(f"This list has no page {page_number}. {exc}.") from exc
    actions = [a for a in ACTIONS.values() if a.state == st and _allowed(request, a)]
    return _render(
        request,
        site,
        "job_list.html",
        f"{STATE_LABELS[st].capitalize()} jobs of {queue}",
        queue=queue,
        state=st,
        state_label=STATE_LABELS[st],
        tabs=[(s, STATE_LABELS[s], _url("list", queue, s)) for s in STATES],
        page=page,
        sort_label=SORT_LABELS[st],
        order_labels=ORDER_LABELS[st],
        actions=actions,
        paused=operations.is_paused(queue),
        window=browse.SEARCH_WINDOW,
        here=request.get_full_path(),
        links={
            "first": _page_link(request, 1),
            "previous": _page_link(request, page.page - 1),
            "next": _page_link(request, page.page + 1),
            "last": _page_link(request, page.pages),
        },
    )


def _page_link(request: HttpRequest, number: int) -> str:
    params = request.GET.copy()
    params["page"] = str(number)
    return f"?{params.urlencode()}"


@guarded
def job_detail(request: HttpRequest, site: AdminSite, queue: str, job_id: str) -> HttpResponse:
    _require(request, "view_jobs")
    queue, job_id = _queue(queue), _job_id(job_id)
    job = read_job(queue, job_id)
    if job is None:
        raise NotFound(
            f"Queue “{queue}” holds no job {job_id}: it has run and been acked, was cancelled "
            "or deleted, or never existed."
        )
    actions = [a for a in ACTIONS.values() if a.state == job.state and _allowed(request, a)]
    return _render(
        request,
        site,
        "job_detail.html",
        f"Job {job_id}",
        queue=queue,
        job=job,
        actions=[a for a in actions if not a.needs_delay],
        can_reschedule=any(a.needs_delay for a in actions),
        units=list(UNITS),
        here=request.get_full_path(),
    )


# ---- actions ----------------------------------------------------------------------------


def _allowed(request: HttpRequest, action: Action) -> bool:
    return request.user.has_perm(f"delayqueue.{action.perm}")


def _next(request: HttpRequest, default: str) -> str:
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return default


def _delay_ms(request: HttpRequest) -> int:
    raw, unit = request.POST.get("delay", "").strip(), request.POST.get("unit", "seconds")
    try:
        amount = float(raw)
    except ValueError:
        amount = -1.0
    seconds = amount * UNITS.get(unit, 0)
    if unit not in UNITS or not 0 <= seconds <= get_settings().max_delay:
        raise ValueError(
            f"“{raw} {unit}” is not a delay; give a number of seconds, minutes, hours or days "
            f"from 0 up to {get_settings().max_delay // 86400} days."
        )
    return int(seconds * 1000)


@require_POST
@guarded
def act(request: HttpRequest, site: AdminSite, queue: str) -> HttpResponse:
    _require(request, "view_jobs")  # before anything touches Redis
    name = request.POST.get("action", "")
    action = ACTIONS.get(name)
    if action is not None:
        _require(request, action.perm)
    elif not any(_allowed(request, a) for a in ACTIONS.values()):
        raise PermissionDenied("you may not act on delayed jobs")
    if not name:
        messages.warning(request, "Choose an action; nothing was changed.")
        return HttpResponseRedirect(_next(request, _url("changelist")))
    if action is None:
        raise NotFound(f"“{name[:100]}” is not an action.")
    queue = _queue(queue)
    if action.from_dashboard:
        back = _url("changelist")
    else:
        back = _url("list", queue, action.state or "dead")
    target = _next(request, back)
    ids = [_job_id(i) for i in request.POST.getlist("ids")]
    if action.state is not None and not ids:
        messages.warning(request, "Select jobs to act on; nothing was changed.")
        return HttpResponseRedirect(target)
    delay_ms = 0
    if action.needs_delay:
        try:
            delay_ms = _delay_ms(request)
        except ValueError as exc:
            messages.error(request, str(exc))
            return HttpResponseRedirect(target)
    if action.confirm and request.POST.get("confirmed") != "yes":
        return _render(
            request,
            site,
            "confirm.html",
            f"{action.label}: are you sure?",
            queue=queue,
            action=action,
            ids=ids,
            next=target,
            back=target,
            dead_count=browse.count(queue, "dead") if action.state is None else 0,
        )
    try:
        perform(action, Call(request, queue, ids, delay_ms))
    except DelayQueueError as exc:
        messages.error(request, f"{action.label} failed: {shown_error(exc)}")
    return HttpResponseRedirect(target)
