"""The delayed-jobs admin through Django's test client: every page and action, the permission
matrix, CSRF, escaping of hostile data and bad input, on the suite's real Redis."""

from __future__ import annotations

import re
from datetime import datetime
from html.parser import HTMLParser
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from delayqueue.engine.keys import global_keys, queue_keys
from delayqueue.services import browse
from tests.support import jobs
from tests.support.admin_pages import Q, messages_of, post, text, url, user_client
from tests.support.states import make_dead, make_inflight, redis_ms, schedule, score
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db

# ---- permissions ------------------------------------------------------------------------


def test_permission_matrix_on_every_page(django_user_model, r):
    job = schedule("a")
    pages = [
        url("changelist"),
        url("list", Q, "scheduled"),
        url("list", Q, "inflight"),
        url("list", Q, "dead"),
        url("job", Q, job.id),
    ]
    clients = {
        "anonymous": Client(),
        "staff": user_client(django_user_model, "staff"),
        "viewer": user_client(django_user_model, "viewer", "view_jobs"),
        "full": user_client(django_user_model, "full", "view_jobs", "change_jobs", "delete_jobs"),
    }
    for page in pages:
        anonymous = clients["anonymous"].get(page)
        assert anonymous.status_code == 302, page
        assert anonymous["Location"].startswith(reverse("admin:login")), page
        assert clients["staff"].get(page).status_code == 403, page
        assert clients["viewer"].get(page).status_code == 200, page
        assert clients["full"].get(page).status_code == 200, page


def test_sidebar_entry_needs_the_view_permission(django_user_model, viewer, r):
    index = text(viewer.get(reverse("admin:index")))
    assert "Delayed jobs" in index and url("changelist") in index
    staff = user_client(django_user_model, "staff")
    assert url("changelist") not in text(staff.get(reverse("admin:index")))


def test_the_admin_index_lists_the_schedules_page_beside_the_jobs(django_user_model, viewer, r):
    entry = reverse("admin:delayqueue_periodicschedule_changelist")
    index = text(viewer.get(reverse("admin:index")))
    assert f'<a href="{entry}">Periodic schedules</a>' in index
    assert index.index(url("changelist")) < index.index(entry)  # beside the jobs, after them
    followed = viewer.get(entry)
    assert followed.status_code == 302 and followed["Location"] == url("schedules")
    assert viewer.get(entry, follow=True).status_code == 200
    staff = user_client(django_user_model, "staff")
    assert entry not in text(staff.get(reverse("admin:index")))
    assert staff.get(entry).status_code == 403
    assert Client().get(entry)["Location"].startswith(reverse("admin:login"))
    # no add, change or delete through the entry; generic look-ups find no row
    assert viewer.get(f"{entry}add/").status_code == 404
    assert viewer.get(f"{entry}1/change/").status_code == 404


def test_the_schedules_entry_brings_no_permission_rows_and_the_migrations_match_the_models():
    """The Schedules page's permissions stay on the delayed-job model (grants made before the
    entry existed keep working), each one row; `makemigrations --check` finds nothing new."""
    rows = Permission.objects.filter(content_type__app_label="delayqueue")
    assert sorted((p.content_type.model, p.codename) for p in rows) == sorted(
        ("delayedjob", codename)
        for codename in (
            "view_jobs",
            "change_jobs",
            "delete_jobs",
            "pause_schedules",
            "run_schedules",
        )
    )
    call_command("makemigrations", "delayqueue", "--check", "--dry-run", stdout=StringIO())


def test_actions_need_change_and_delete_permissions(django_user_model, viewer, r):
    job, dead = schedule("a"), make_dead("d")
    due = score(r, queue_keys(Q).scheduled, job.id)
    assert post(viewer, "run_now", job.id).status_code == 403
    assert post(viewer, "pause").status_code == 403
    assert score(r, queue_keys(Q).scheduled, job.id) == due
    changer = user_client(django_user_model, "changer", "view_jobs", "change_jobs")
    for action in ("delete", "purge_all"):
        response = post(changer, action, dead.id, confirmed="yes")
        assert response.status_code == 403, action
    assert score(r, queue_keys(Q).dead, dead.id) is not None
    assert post(changer, "run_now", job.id).status_code == 200
    assert score(r, queue_keys(Q).scheduled, job.id) != due
    # the pages offer only what the user may do
    assert "Delete selected jobs" not in text(changer.get(url("list", Q, "dead")))
    assert "Retry now selected jobs" in text(changer.get(url("list", Q, "dead")))
    assert 'name="action"' not in text(viewer.get(url("list", Q, "scheduled")))


def test_csrf_is_enforced_on_actions(django_user_model, r):
    job = schedule("a")
    due = score(r, queue_keys(Q).scheduled, job.id)
    user = django_user_model.objects.create_user("full", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="delayqueue"),
    )
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    refused = client.post(url("act", Q), {"action": "run_now", "ids": [job.id]})
    assert refused.status_code == 403
    assert score(r, queue_keys(Q).scheduled, job.id) == due
    page = text(client.get(url("job", Q, job.id)))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    accepted = client.post(
        url("act", Q),
        {"action": "run_now", "ids": [job.id], "csrfmiddlewaretoken": token.group(1)},
    )
    assert accepted.status_code == 302
    assert score(r, queue_keys(Q).scheduled, job.id) != due


def test_actions_are_post_only(admin_client, r):
    assert admin_client.get(url("act", Q), {"action": "pause"}).status_code == 405
    assert not r.exists(queue_keys(Q).paused)


# ---- pages ------------------------------------------------------------------------------


def test_dashboard_shows_queues_counts_chart_and_live_workers(admin_client, delay_worker, r):
    schedule("soon", seconds=150)
    make_inflight("f")
    make_dead("d")
    # due within the chart's first minute, and late enough that the worker serving "other"
    # has not dispatched it by the time the pages are read (5 s ran out on a loaded machine)
    schedule("x", seconds=30, queue="other", task=jobs.plain)
    r.sadd(global_keys().queues, Q)
    worker = delay_worker("--queues", "other")
    wait_for(lambda: r.zcard(global_keys().workers))
    response = admin_client.get(url("changelist"))
    page = text(response)
    assert response.status_code == 200
    rows = {q.name: q for q in response.context["queues"]}
    assert (rows[Q].scheduled, rows[Q].inflight, rows[Q].dead) == (1, 1, 1)
    assert rows[Q].last_minute.dispatched == 2 and rows[Q].last_minute.failed == 1
    assert rows["other"].scheduled == 1
    assert "in 2 min" in page  # next due of "tests"
    assert '<svg viewBox="0 0 600 160" role="img"' in page
    assert "+2 min" in page and ": 1 job</title>" in page  # the bar of "soon"
    assert f'<td class="num">{worker.pid}</td>' in page
    only = admin_client.get(url("changelist"), {"chart": "other"})
    assert only.context["chart"].minutes[0].count == 1
    assert sum(b.count for b in only.context["chart"].minutes) == 1
    assert admin_client.get(url("changelist"), {"chart": "nope"}).status_code == 404


def test_dashboard_says_when_no_worker_is_alive_and_no_queue_exists(admin_client, r):
    page = text(admin_client.get(url("changelist")))
    assert "No queues yet" in page
    assert "is alive: no scheduled job will be dispatched" in page


def test_list_pages_paginate_order_and_search(admin_client, r):
    made = [schedule(f"j{i}", seconds=100 + i) for i in range(60)]
    keyed = schedule("k", seconds=5000, key="close-order:7")
    first = admin_client.get(url("list", Q, "scheduled"))
    assert [row.id for row in first.context["page"].rows] == [j.id for j in made[:50]]
    assert "1–50 of 61" in text(first) and "page 1 of 2" in text(first)
    second = admin_client.get(url("list", Q, "scheduled"), {"page": "2", "order": "desc"})
    assert [row.id for row in second.context["page"].rows][-1] == made[0].id
    assert "in 1 min" in text(first)  # made[0] is due in 100 s
    found = admin_client.get(url("list", Q, "scheduled"), {"q": "close-order:7"})
    assert [row.id for row in found.context["page"].rows] == [keyed.id]
    assert "Found by exact dedupe key" in text(found)
    by_id = admin_client.get(url("list", Q, "dead"), {"q": keyed.id})
    assert "That job is not dead: it is" in text(by_id)
    assert url("job", Q, keyed.id) in text(by_id)
    by_task = admin_client.get(url("list", Q, "scheduled"), {"task": "tests.support.jobs.record"})
    assert by_task.context["page"].matched == 61
    none = admin_client.get(url("list", Q, "scheduled"), {"task": "tests.support.jobs.plain"})
    assert "No scheduled job matches" in text(none)


def test_search_says_it_is_bounded(admin_client, r, monkeypatch):
    monkeypatch.setattr(browse, "SEARCH_WINDOW", 10)
    for i in range(15):
        schedule(f"j{i}")
    page = text(admin_client.get(url("list", Q, "scheduled"), {"q": "record"}))
    assert "among the first 10 of 15 jobs" in page and "bounded to 10 jobs" in page


def test_job_detail_shows_everything_about_a_dead_job(admin_client, r):
    job = make_dead("d", error="ValueError: boom", key="order:9")
    response = admin_client.get(url("job", Q, job.id))
    page = text(response)
    assert "tests.support.jobs.record" in page and "order:9" in page
    assert '<pre class="code" id="job-args">[\n  &quot;d&quot;\n]</pre>' in page
    assert "1 of 1" in page  # attempts of max
    assert "Fencing token</dt><dd>1</dd>" in page
    assert "ValueError: boom" in page and "Traceback (most recent call last)" in page
    assert "failed 1 of 1 attempts" in page  # why it is dead
    assert "<td>failed</td>" in page  # the attempt's outcome
    assert "Retry now" in page and "Delete…" in page


def test_hostile_job_data_is_escaped_everywhere(admin_client, r):
    hostile = "<script>alert(1)</script>"
    job = schedule(hostile, key=f"k{hostile}")
    dead = make_dead(hostile, error=f"ValueError: {hostile}")
    pages = [
        url("list", Q, "scheduled"),
        url("list", Q, "dead"),
        url("job", Q, job.id),
        url("job", Q, dead.id),
        url("list", Q, "scheduled") + "?q=" + hostile,
    ]
    for page in pages:
        body = text(admin_client.get(page)).replace("<wbr>", "")  # wrap points, no text
        assert "<script>alert" not in body, page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body, page
    bad_id = text(admin_client.get(url("job", Q, "J").replace("/J/", "/<img onerror=x>/")))
    assert "“&lt;img onerror=x&gt;” is not a job id" in bad_id


@pytest.mark.parametrize(
    "path, message",
    [
        ("list:tests:scheduled?page=abc", "is not a page number"),
        ("list:tests:scheduled?page=0", "has no page 0"),
        ("list:tests:scheduled?page=99", "has no page 99"),
        ("list:tests:scheduled?order=sideways", "is not an order"),
        ("list:tests:sideways", "is not a job list"),
        ("list:nosuchqueue:scheduled", "There is no queue named"),
        ("list:bad%20name:scheduled", "There is no queue named"),
        ("job:tests:not-a-job-id", "is not a job id"),
        ("job:tests:01ARZ3NDEKTSV4RRFFQ69G5FAV", "holds no job 01ARZ3NDEKTSV4RRFFQ69G5FAV"),
    ],
)
def test_bad_input_is_a_404_with_a_message(admin_client, r, path, message):
    schedule("a")
    name, queue, rest = path.split(":", 2)
    rest, _, query = rest.partition("?")
    target = f"{url(name, 'Q', 'X').replace('/Q/', f'/{queue}/').replace('/X/', f'/{rest}/')}"
    response = admin_client.get(f"{target}?{query}" if query else target)
    assert response.status_code == 404
    assert message in text(response)
    assert "Back to the delayed jobs dashboard" in text(response)


def test_bad_action_input_is_a_404_or_a_message(admin_client, r):
    job = schedule("a")
    assert post(admin_client, "explode", job.id).status_code == 404
    assert post(admin_client, "run_now", "../../etc").status_code == 404
    no_action = post(admin_client, "", job.id)
    assert "Choose an action; nothing was changed." in messages_of(no_action)
    nothing = post(admin_client, "run_now")
    assert "Select jobs to act on; nothing was changed." in messages_of(nothing)
    bad_delay = post(admin_client, "reschedule", job.id, delay="soon", unit="minutes")
    assert any("is not a delay" in m for m in messages_of(bad_delay))
    too_far = post(admin_client, "reschedule", job.id, delay="9999", unit="days")
    assert any("is not a delay" in m for m in messages_of(too_far))


@override_settings(TIME_ZONE="Asia/Kolkata")
def test_times_are_shown_in_the_current_timezone(admin_client, r):
    job = schedule("a", seconds=3600)
    due = score(r, queue_keys(Q).scheduled, job.id)
    assert due is not None
    local = datetime.fromtimestamp(due / 1000, tz=ZoneInfo("Asia/Kolkata"))
    for page in (url("list", Q, "scheduled"), url("job", Q, job.id)):
        body = text(admin_client.get(page))
        assert local.strftime("%Y-%m-%d %H:%M:%S") in body, page
        assert "in 59 min" in body or "in 1 h" in body, page


@override_settings(DELAYQUEUE={"REDIS_URL": "redis://127.0.0.1:1/0", "SOCKET_TIMEOUT": 1})
def test_redis_down_is_a_clear_503(admin_client):
    for page in (url("changelist"), url("list", Q, "scheduled")):
        response = admin_client.get(page)
        assert response.status_code == 503
        assert "did not answer" in text(response)


# ---- actions ----------------------------------------------------------------------------


def test_run_now_and_reschedule_from_the_job_page(admin_client, r):
    job = schedule("a", seconds=3600)
    before = redis_ms(r)
    response = post(admin_client, "run_now", job.id, next=url("list", Q, "scheduled"))
    assert response.redirect_chain[-1][0] == url("list", Q, "scheduled")
    assert f"Job {job.id} (tests.support.jobs.record) will run now." in messages_of(response)
    due = score(r, queue_keys(Q).scheduled, job.id)
    assert due is not None and before <= due <= redis_ms(r)
    later = post(admin_client, "reschedule", job.id, delay="2", unit="hours")
    assert f"Job {job.id} (tests.support.jobs.record) rescheduled." in messages_of(later)
    due = score(r, queue_keys(Q).scheduled, job.id)
    assert due is not None and due >= before + 2 * 3600_000


def test_cancel_asks_first_then_cancels(admin_client, r):
    job = schedule("a")
    confirm = post(admin_client, "cancel", job.id)
    assert confirm.status_code == 200
    assert "Yes, I’m sure" in text(confirm) and job.id in text(confirm)
    assert score(r, queue_keys(Q).scheduled, job.id) is not None
    done = post(admin_client, "cancel", job.id, confirmed="yes")
    assert f"Job {job.id} (tests.support.jobs.record) cancelled." in messages_of(done)
    assert not r.exists(queue_keys(Q).job(job.id))


def test_force_back_an_inflight_job(admin_client, r):
    job = make_inflight("f")
    assert "Yes, I’m sure" in text(post(admin_client, "force_back", job.id))
    done = post(admin_client, "force_back", job.id, confirmed="yes")
    assert (
        f"Job {job.id} (tests.support.jobs.record) forced back to scheduled, due now."
        in messages_of(done)
    )
    assert score(r, queue_keys(Q).scheduled, job.id) is not None
    assert "by full in the admin" in (r.hget(queue_keys(Q).job(job.id), "hist") or "")


def test_retry_and_delete_dead_jobs_one_and_in_bulk(admin_client, r):
    one, two, three, four = (make_dead(f"d{i}") for i in range(4))
    retried = post(admin_client, "retry", one.id)
    assert f"Job {one.id} (tests.support.jobs.record) requeued to run now." in messages_of(retried)
    assert score(r, queue_keys(Q).scheduled, one.id) is not None
    bulk = post(admin_client, "retry", two.id, three.id)
    assert (
        f"2 jobs requeued to run now: {two.id} (tests.support.jobs.record); "
        f"{three.id} (tests.support.jobs.record)." in messages_of(bulk)
    )
    confirm = post(admin_client, "delete", four.id)
    assert "gone for good" in text(confirm)
    assert score(r, queue_keys(Q).dead, four.id) is not None
    deleted = post(admin_client, "delete", four.id, confirmed="yes")
    assert f"Job {four.id} (tests.support.jobs.record) deleted." in messages_of(deleted)
    assert r.zcard(queue_keys(Q).dead) == 0


def test_retry_all_and_purge_all_dead(admin_client, r):
    for i in range(3):
        make_dead(f"d{i}")
    confirm = post(admin_client, "retry_all")
    assert "Requeue all 3 dead jobs" in text(confirm)
    assert "3 dead jobs of tests requeued." in messages_of(
        post(admin_client, "retry_all", confirmed="yes")
    )
    assert r.zcard(queue_keys(Q).dead) == 0 and r.zcard(queue_keys(Q).scheduled) == 3
    for i in range(2):
        make_dead(f"e{i}")
    assert "Delete all 2 dead jobs" in text(post(admin_client, "purge_all"))
    purged = post(admin_client, "purge_all", confirmed="yes")
    assert "2 dead jobs of tests deleted." in messages_of(purged)
    assert r.zcard(queue_keys(Q).dead) == 0


def test_an_action_on_a_job_that_moved_on_says_so(admin_client, r):
    job, dead = schedule("a"), make_dead("d")
    operations_done_elsewhere = [
        ("run_now", job.id, lambda: r.zrem(queue_keys(Q).scheduled, job.id)),
        ("retry", dead.id, lambda: r.zrem(queue_keys(Q).dead, dead.id)),
    ]
    for action, job_id, move_on in operations_done_elsewhere:
        move_on()
        response = post(admin_client, action, job_id, confirmed="yes")
        assert response.status_code == 200
        assert any("moved on meanwhile" in m and job_id in m for m in messages_of(response))
    for action in ("cancel", "force_back", "delete"):
        response = post(admin_client, action, job.id, confirmed="yes")
        assert any("moved on meanwhile" in m for m in messages_of(response)), action


def test_pause_and_resume_a_queue(admin_client, r):
    schedule("a")
    paused = post(admin_client, "pause")
    assert paused.redirect_chain[-1][0] == url("changelist")
    assert "Queue tests paused." in messages_of(paused)
    assert r.get(queue_keys(Q).paused) == "paused by full in the admin"
    assert "badge paused" in text(paused)
    assert "was already paused" in messages_of(post(admin_client, "pause"))[0]
    assert "Queue tests resumed." in messages_of(post(admin_client, "resume"))
    assert not r.exists(queue_keys(Q).paused)


def test_unsafe_next_urls_are_ignored(admin_client, r):
    job = schedule("a")
    response = post(admin_client, "run_now", job.id, follow=False, next="https://evil.example/")
    assert response["Location"] == url("list", Q, "scheduled")


# ---- strict Content-Security-Policy -----------------------------------------------------


class InlineCode(HTMLParser):
    """Everything in a page that a Content-Security-Policy without 'unsafe-inline' blocks
    (inline scripts, <style> elements, style attributes, on* handlers, javascript: URLs),
    and the static files the page loads."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.static: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "style":
            self.found.append("<style> element")
        for name, value in attrs:
            if name == "style" or name.startswith("on"):
                self.found.append(f"<{tag} {name}={value!r}>")
            if name in ("href", "src", "action") and (value or "").lower().startswith(
                "javascript:"
            ):
                self.found.append(f"<{tag} {name}={value!r}>")
        if tag == "script":
            self._in_script = "src" not in named
        for name in ("href", "src"):
            value = named.get(name) or ""
            if tag in ("link", "script") and value.startswith(settings.STATIC_URL):
                self.static.append(value.removeprefix(settings.STATIC_URL))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.found.append(f"inline script: {data.strip()[:60]!r}")


def static_file(path: str) -> Path:
    """Where Django's staticfiles finders find ``path`` (as ``collectstatic`` would)."""
    where = finders.find(path)
    assert isinstance(where, str), f"{path} is not found by the staticfiles finders"
    return Path(where)


def test_every_page_works_under_a_strict_content_security_policy(admin_client, r):
    dead, inflight, scheduled = make_dead("d"), make_inflight("f"), schedule("s")
    pages = {
        "dashboard": admin_client.get(url("changelist")),
        "dashboard, one queue's chart": admin_client.get(url("changelist"), {"chart": Q}),
        **{f"{s} list": admin_client.get(url("list", Q, s)) for s in ("scheduled", "inflight")},
        "dead list": admin_client.get(url("list", Q, "dead"), {"q": "record"}),
        **{
            f"{job.id} page": admin_client.get(url("job", Q, job.id))
            for job in (scheduled, inflight, dead)
        },
        "confirm cancel": post(admin_client, "cancel", scheduled.id),
        "confirm purge all": post(admin_client, "purge_all"),
        "not found": admin_client.get(url("list", Q, "nowhere")),
    }
    loaded: set[str] = set()
    for name, response in pages.items():
        assert response.status_code in (200, 404), name
        parser = InlineCode()
        parser.feed(text(response))
        assert parser.found == [], name
        assert {"delayqueue/admin.css", "delayqueue/admin.js"} <= set(parser.static), name
        # an icon of its own: no browser asks for /favicon.ico (a 404) on these pages
        assert {"delayqueue/favicon.svg", "delayqueue/favicon.png"} <= set(parser.static), name
        loaded.update(parser.static)
    for path in sorted(loaded):
        assert static_file(path).is_file()


def test_the_admin_static_files_hold_the_pages_css_and_script():
    css = static_file("delayqueue/admin.css").read_text()
    js = static_file("delayqueue/admin.js").read_text()
    assert "var(--body-quiet-color)" in css and ".dq .chart .bar" in css
    assert not re.search(r"#[0-9a-fA-F]{3,6}\b|rgb\(", css), (
        "colours come from the admin's variables"
    )
    assert "select-all" in js


# ---- what each list and message says ----------------------------------------------------


def test_the_dead_list_shows_why_and_the_last_error_shortened_and_escaped(admin_client, r):
    long_message = "order 1001 could not be closed: " + "payment provider said no; " * 20
    dead = make_dead("d", error=f"PaymentError: <b>{long_message}</b>\nsecond line")
    response = admin_client.get(url("list", Q, "dead"))
    (row,) = response.context["page"].rows
    assert row.reason == "failed 1 of 1 attempts"
    assert row.error.startswith("PaymentError: <b>order 1001 could not be closed: payment")
    assert row.error.endswith("…") and len(row.error) == browse.ERROR_CHARS
    assert "\n" not in row.error  # one line
    page = text(response).replace("<wbr>", "")
    cell = re.search(rf'<tr data-job="{dead.id}">.*?<td class="col-reason">(.*?)</td>', page, re.S)
    assert cell is not None
    assert '<span class="reason">failed 1 of 1 attempts</span>' in cell.group(1)
    assert "PaymentError: &lt;b&gt;order 1001 could not be closed" in cell.group(1)
    assert "<b>" not in cell.group(1)
    assert "second line" not in cell.group(1)  # shortened long before it


def test_counts_of_one_are_singular(admin_client, r):
    dead = make_dead("d")
    pages = {
        "dead list": admin_client.get(url("list", Q, "dead")),
        "dead search": admin_client.get(url("list", Q, "dead"), {"q": "record"}),
        "dashboard": admin_client.get(url("changelist")),
        "confirm retry all": post(admin_client, "retry_all"),
        "confirm purge all": post(admin_client, "purge_all"),
    }
    for name, response in pages.items():
        assert re.search(r"\b1 (dead )?jobs\b", text(response)) is None, name
    dead_list = text(pages["dead list"])
    assert "Retry the 1 dead job…" in dead_list and "Delete the 1 dead job…" in dead_list
    assert "1 match among the 1 job." in " ".join(text(pages["dead search"]).split())
    assert "Requeue the 1 dead job of queue" in text(pages["confirm retry all"])
    assert "Delete the 1 dead job of queue" in text(pages["confirm purge all"])
    assert messages_of(post(admin_client, "retry_all", confirmed="yes")) == [
        "1 dead job of tests requeued."
    ]
    assert r.zscore(queue_keys(Q).scheduled, dead.id) is not None
    for tag in ("e", "f"):
        make_dead(tag)
    assert "Retry all 2 dead jobs…" in text(admin_client.get(url("list", Q, "dead")))


def test_the_due_chart_summary_is_singular_for_one_job(admin_client, r):
    schedule("soon", seconds=150)
    page = text(admin_client.get(url("changelist"), {"chart": Q}))
    assert "1 job in all" in page and "1 jobs" not in page


def test_action_messages_name_the_task_and_the_key(admin_client, r):
    keyed = schedule("a", key="close-order:7")
    plain = schedule("b")
    done = post(admin_client, "run_now", keyed.id)
    assert messages_of(done) == [
        f"Job {keyed.id} (tests.support.jobs.record, key “close-order:7”) will run now."
    ]
    # a cancelled job's data is gone, yet its message still names it
    cancelled = post(admin_client, "cancel", keyed.id, plain.id, confirmed="yes")
    assert messages_of(cancelled) == [
        f"2 jobs cancelled: {keyed.id} (tests.support.jobs.record, key “close-order:7”); "
        f"{plain.id} (tests.support.jobs.record)."
    ]
    dead = make_dead("d", key="invoice:9")
    r.zrem(queue_keys(Q).dead, dead.id)  # moved on: someone else took it out of dead
    missed = post(admin_client, "retry", dead.id)
    assert messages_of(missed) == [
        f"Job {dead.id} (tests.support.jobs.record, key “invoice:9”) is no longer dead — moved on "
        "meanwhile (run, retried, cancelled or deleted by someone or something else); "
        "nothing was done."
    ]


def test_action_messages_escape_a_hostile_key(admin_client, r):
    job = schedule("a", key="<img src=x onerror=alert(1)>")
    body = text(post(admin_client, "run_now", job.id))
    assert "<img src=x" not in body
    assert (
        f"Job {job.id} (tests.support.jobs.record, key “&lt;img src=x onerror=alert(1)&gt;”)"
        in body
    )


def test_both_search_boxes_share_one_style(admin_client, r):
    schedule("a")
    page = text(admin_client.get(url("list", Q, "scheduled")))
    boxes = re.findall(r'<input type="text" name="(q|task)" id="([\w-]+)" class="dq-search"', page)
    assert boxes == [("q", "searchbar"), ("task", "task-filter")]
    css = static_file("delayqueue/admin.css").read_text()
    assert ".dq #toolbar #searchbar.dq-search, .dq #toolbar #task-filter.dq-search {" in css


@pytest.mark.parametrize(
    "state, label, options",
    [
        ("scheduled", "Sort by due time", ["soonest first", "latest first"]),
        ("inflight", "Sort by deadline", ["soonest first", "latest first"]),
        ("dead", "Sort by time of death", ["most recent first", "longest ago first"]),
    ],
)
def test_the_sort_menu_says_what_it_sorts_by(admin_client, r, state, label, options):
    schedule("a")
    page = text(admin_client.get(url("list", Q, state)))
    assert f'<label for="order">{label}</label>' in page
    assert ">Order<" not in page
    select = re.search(r'<select name="order" id="order">(.*?)</select>', page, re.S)
    assert select is not None
    assert re.findall(r">([^<]+)</option>", select.group(1)) == options
    default = "descending" if state == "dead" else "ascending"
    assert f'aria-sort="{default}"' in page


def test_keys_task_names_and_json_wrap_at_their_punctuation(admin_client, r):
    schedule("a-b", key="close-order:1001/eu")
    page = text(admin_client.get(url("list", Q, "scheduled")))
    assert '<code class="token">close-<wbr>order:<wbr>1001/<wbr>eu</code>' in page
    assert '<span class="token">tests.<wbr>support.<wbr>jobs.<wbr>record</span>' in page
    assert '<code class="json">[&quot;a-<wbr>b&quot;]<wbr></code>' not in page  # no trailing
    assert '<code class="json">[&quot;a-<wbr>b&quot;]</code>' in page
    css = static_file("delayqueue/admin.css").read_text()
    assert "break-all" not in css  # which breaks every token anywhere
    assert ".dq #result_list code.json { white-space: pre-wrap; overflow-wrap: anywhere; }" in css


def test_the_dashboard_links_each_queue_name_to_its_jobs(admin_client, r):
    schedule("a")
    page = text(admin_client.get(url("changelist")))
    link = f'<th scope="row"><a href="{url("list", Q, "scheduled")}" class="queue-link"'
    assert link in page
