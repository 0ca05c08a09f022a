"""The delayed-jobs admin in a real browser (Debian's headless Chromium through Playwright)
against a live server, with real jobs run by a real delay worker and Celery worker.

Every page of the delayed-jobs admin is served under a strict Content-Security-Policy (no
'unsafe-inline'), and the test fails on any violation the browser reports.

Screenshots go to test-artifacts/ at the repository root (git-ignored)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import (
    ConsoleMessage,
    Page,
    Request,
    Response,
    Route,
    expect,
    sync_playwright,
)

from delayqueue.engine import schedules as engine_schedules
from delayqueue.engine.keys import queue_keys
from delayqueue.periodic import declarations, planner
from delayqueue.periodic import declare as declaring
from delayqueue.services import schedules as schedule_service
from tests.support import jobs
from tests.support.processes import ROOT
from tests.support.states import make_dead, schedule
from tests.support.waiting import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
ARTIFACTS = ROOT / "test-artifacts"
DASHBOARD = "/admin/delayqueue/delayedjob/"
STRICT_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)


def serve_with_strict_csp(route: Route) -> None:
    """The delayed-jobs admin's pages as the server sent them (redirects too), plus the
    Content-Security-Policy header."""
    if route.request.resource_type != "document" or DASHBOARD not in route.request.url:
        route.fallback()
        return
    response = route.fetch(max_redirects=0)
    headers = {**response.headers, "content-security-policy": STRICT_CSP}
    route.fulfill(response=response, headers=headers)


@pytest.fixture
def operator(django_user_model: Any) -> tuple[str, str]:
    """A superuser, created before the browser starts (the ORM refuses to run while
    Playwright's event loop is running in this thread)."""
    django_user_model.objects.create_superuser("operator", "op@example.com", "s3cret-pw")
    return "operator", "s3cret-pw"


@pytest.fixture
def page(live_server: Any, operator: tuple[str, str]) -> Iterator[Page]:
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        context = browser.new_context(viewport={"width": 1280, "height": 900}, locale="en-US")
        context.set_default_timeout(15_000)
        context.route("**/*", serve_with_strict_csp)
        tab = context.new_page()
        violations: list[str] = []

        def on_console(message: ConsoleMessage) -> None:
            if "Content Security Policy" in message.text:
                violations.append(message.text)

        tab.on("console", on_console)
        tab.goto(f"{live_server.url}/admin/login/?next={DASHBOARD}")
        tab.fill("#id_username", operator[0])
        tab.fill("#id_password", operator[1])
        tab.click("input[type=submit]")
        expect(tab.locator("h1")).to_have_text("Delayed jobs")
        try:
            yield tab
            assert violations == [], violations
        finally:
            context.close()
            browser.close()


def reload_until(page: Page, predicate: Any, timeout: float = 20) -> None:
    def check() -> bool:
        page.reload()
        return bool(predicate())

    wait_for(check, timeout=timeout, interval=0.2)


def assert_fits_phone(page: Page, screenshot: str) -> None:
    """At 390 px wide the page scrolls only vertically (wide tables scroll in their box)."""
    page.set_viewport_size({"width": 390, "height": 844})
    page.screenshot(path=str(ARTIFACTS / screenshot), full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.set_viewport_size({"width": 1280, "height": 900})


def test_operator_runs_a_scheduled_job_now_and_retries_a_dead_one(
    page, live_server, celery_worker, delay_worker, r
):
    target = schedule("by-key", seconds=3600, key="close-order:1001")
    for minutes in (3, 3, 7, 12, 40, 41):
        schedule(f"later-{minutes}", seconds=minutes * 60)
    schedule("tomorrow", seconds=20 * 3600)
    worker = delay_worker("--queues", "tests")
    doomed = jobs.always_fails.delay_for("doomed", seconds=0, on_commit=False)
    wait_for(lambda: r.zscore(queue_keys("tests").dead, doomed.id) is not None, timeout=30)

    # the dashboard: the queue with its counts, the chart, the live worker
    page.goto(f"{live_server.url}{DASHBOARD}")
    row = page.locator("tr[data-queue=tests]")
    expect(row.locator("td").first).to_have_text("8")  # scheduled
    expect(page.locator("#due-chart svg rect.bar").first).to_be_visible()
    expect(page.locator("#workers")).to_contain_text(str(worker.pid))
    page.screenshot(path=str(ARTIFACTS / "admin-dashboard.png"), full_page=True)
    assert_fits_phone(page, "admin-dashboard-390.png")

    # find the scheduled job by its key and run it now: it leaves the list and runs
    row.locator("a").first.click()
    page.fill("#searchbar", "close-order:1001")
    page.click("#search-button")
    job_row = page.locator(f"tr[data-job='{target.id}']")
    expect(job_row).to_be_visible()
    page.emulate_media(color_scheme="dark")
    page.reload()
    page.screenshot(path=str(ARTIFACTS / "admin-job-list-dark.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    assert_fits_phone(page, "admin-job-list-390.png")
    page.check("#select-all")  # admin.js, allowed by the policy: checks every row
    expect(job_row.locator("input[name=ids]")).to_be_checked()
    page.select_option("select[name=action]", "run_now")
    page.click("#changelist-form button[type=submit]")
    expect(page.locator(".messagelist")).to_contain_text(
        f"Job {target.id} (tests.support.jobs.record, key “close-order:1001”) will run now."
    )
    reload_until(page, lambda: page.locator(f"tr[data-job='{target.id}']").count() == 0)
    expect(page.locator("#result_list")).to_contain_text("No scheduled job matches.")
    wait_for(lambda: [run for run in jobs.ran("record") if run["tag"] == "by-key"])

    # the dead job: its page shows the traceback; retry it and the Celery worker runs it again
    page.goto(f"{live_server.url}{DASHBOARD}tests/dead/")
    page.click(f"tr[data-job='{doomed.id}'] th a")
    expect(page.locator("#traceback")).to_contain_text("ValueError: boom doomed")
    expect(page.locator("#attempts")).to_contain_text("failed")
    page.screenshot(path=str(ARTIFACTS / "admin-job-detail.png"), full_page=True)
    assert_fits_phone(page, "admin-job-detail-390.png")
    runs_before = len(jobs.ran("fail"))
    assert runs_before == 3
    page.click("#job-actions button:has-text('Retry now')")
    expect(page.locator(".messagelist")).to_contain_text(
        f"Job {doomed.id} (tests.support.jobs.always_fails) requeued to run now."
    )
    wait_for(lambda: len(jobs.ran("fail")) > runs_before, timeout=30)


def test_the_dead_list_fits_1280_pixels_and_no_request_fails(page, live_server, r):
    """At 1280x800 the dead list shows its Reason column (why, and the last error) inside the
    window, however long the error, key and arguments; no request of any page fails, the
    icon included; both search boxes look alike."""
    failed: list[str] = []
    icons_loaded: list[str] = []

    def on_response(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")
        elif "favicon" in response.url:
            icons_loaded.append(response.url)

    def on_request_failed(request: Request) -> None:
        if request.failure != "net::ERR_ABORTED":  # cut short by the next navigation
            failed.append(f"{request.failure} {request.url}")

    page.on("response", on_response)
    page.on("requestfailed", on_request_failed)
    error = (
        "PaymentGatewayError: the provider refused to capture the payment of order 1001 "
        "because the card was declined twice; https://payments.example.com/orders/1001/"
        "attempts?include=declines&format=json " * 3
    )
    keys = [
        "customer-invoice-reminder:tenant-4242:order-1001:2026-11-23T06:00:00Z",
        "x" * 90,  # one token with no punctuation: may wrap anywhere
    ]
    for n, key in enumerate(keys):
        make_dead(f"order-{n}-" + "a" * 60, error=error, key=key)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}{DASHBOARD}")
    page.click("tr[data-queue=tests] th a")  # the queue's name leads to its jobs
    expect(page.locator("h1")).to_contain_text("Scheduled jobs of tests")
    page.click(".tabs a:has-text('Dead')")
    page.wait_for_load_state("load")  # the admin's sidebar script has run: sidebar open
    expect(page.locator("#result_list .error-summary").first).to_contain_text(
        "PaymentGatewayError: the provider refused"
    )
    expect(page.locator("label[for=order]")).to_have_text("Sort by time of death")
    # the window as it is (a full-page shot lays the page out anew, on a taller window)
    page.screenshot(path=str(ARTIFACTS / "admin-dead-list-1280.png"))

    width = 1280
    assert page.locator("#nav-sidebar").is_visible()  # the widest layout: sidebar open
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    for cell in [page.locator("#result_list th.col-reason")] + page.locator(
        "#result_list td.col-reason"
    ).all():
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, box
    results = page.locator("#changelist .results")
    assert results.evaluate("e => e.scrollWidth <= e.clientWidth"), "the table scrolls sideways"

    # a key with punctuation wraps at it, not inside a word
    key = page.locator("#result_list td.col-key code", has_text="customer-invoice")
    lines = key.evaluate(
        """e => { const r = document.createRange(); const out = []; const t = e.textContent;
        let node = e.firstChild, top = null, line = "";
        const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
        while ((node = walker.nextNode())) { for (let i = 0; i < node.length; i++) {
          r.setStart(node, i); r.setEnd(node, i + 1); const y = r.getBoundingClientRect().top;
          if (top !== null && Math.abs(y - top) > 2) { out.push(line); line = ""; }
          top = y; line += node.data[i]; } }
        out.push(line); return out; }"""
    )
    assert "".join(lines) == keys[0]
    assert len(lines) > 1 and all(line[-1] in "-:" for line in lines[:-1]), lines

    # both search boxes look alike
    style = """e => { const s = getComputedStyle(e); return [s.height, s.borderTopWidth,
        s.borderTopColor, s.borderRadius, s.paddingLeft, s.fontSize, s.backgroundColor]; }"""
    assert page.locator("#searchbar").evaluate(style) == page.locator("#task-filter").evaluate(
        style
    )

    # every page names its own icon, which loads; nothing 404s anywhere
    for path in ("", "tests/scheduled/", "tests/inflight/", "tests/dead/"):
        page.goto(f"{live_server.url}{DASHBOARD}{path}")
        icons = page.locator("link[rel~=icon]")
        assert icons.count() >= 1
        for href in [icons.nth(i).get_attribute("href") for i in range(icons.count())]:
            icon = page.request.get(f"{live_server.url}{href}")
            assert icon.ok and icon.headers["content-type"].startswith("image/"), href
    page.click("#result_list th a")
    expect(page.locator("#last-error")).to_contain_text("PaymentGatewayError")
    page.wait_for_load_state("networkidle")
    assert failed == [], failed
    assert any("/static/delayqueue/favicon." in url for url in icons_loaded), icons_loaded
    assert not any(url.endswith("/favicon.ico") for url in icons_loaded)


def test_the_schedules_page_fits_1280_pixels_with_every_column_visible(
    page, live_server, monkeypatch, r
):
    """At 1280x800 with the sidebar open, the Schedules page shows every column, the state
    and the actions included, inside the window, however long the names, rules and time
    zones; each of the next runs is one line; the admin index leads to the page."""
    monkeypatch.setattr(declarations, "_in_code", {})
    long_name = "customer-invoice-reminders-for-every-tenant-of-the-eu-region-on-weekdays"
    declared: list[tuple[str, dict[str, Any]]] = [
        (long_name, {"cron": "30 6 * * 1-5", "timezone": "America/Argentina/Buenos_Aires"}),
        ("x" * 70, {"every": 60}),  # one token with no punctuation: may wrap anywhere
        ("nightly-report", {"cron": "0 3 1,15 * *", "timezone": "Australia/Lord_Howe"}),
    ]
    task = "tests.support.jobs.single_deadline_probe"
    for name, rule in declared:
        build = declaring._builder(task, (name, 0), None, "tests")
        rule = {"cron": None, "every": None, "timezone": None, **rule}
        declarations.add(
            declaring._declared(name, task, missed="once", source="code", build=build, **rule)
        )
    planner.reconcile()
    every_minute = "x" * 70
    [stored] = engine_schedules.stored("tests", every_minute)
    assert stored.next_ms is not None
    planner.fire_due("tests", now_ms=stored.next_ms + 1)  # a last run, with its job's link
    schedule_service.pause("nightly-report")

    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/admin/")
    page.click("a:has-text('Periodic schedules')")
    expect(page.locator("h1")).to_have_text("Periodic schedules")
    page.wait_for_load_state("load")  # the admin's sidebar script has run: sidebar open
    assert page.locator("#nav-sidebar").is_visible()
    expect(page.locator("#schedules tbody tr")).to_have_count(3)
    page.screenshot(path=str(ARTIFACTS / "admin-schedules-1280.png"))

    width = 1280
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    wrap = page.locator("#schedules .dq-wrap")
    assert wrap.evaluate("e => e.scrollWidth <= e.clientWidth"), "the table scrolls sideways"
    headers = page.locator("#schedules thead th").all()
    assert [(h.text_content() or "").strip() for h in headers][-2:] == ["State", "Actions"]
    for cell in headers + page.locator("#schedules tbody th, #schedules tbody td").all():
        box = cell.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, (cell.inner_text(), box)
    for button in page.locator("#schedules tbody button").all():
        box = button.bounding_box()
        assert box is not None and box["x"] + box["width"] <= width, box

    # each next run is one line, not wrapped over several
    runs = page.locator("#schedules td.next-runs li")
    assert runs.count() == 2 * 5  # the paused schedule has none
    line_height = runs.first.evaluate("e => parseFloat(getComputedStyle(e).lineHeight)")
    for run in runs.all():
        box = run.bounding_box()
        assert box is not None and box["height"] < 1.5 * line_height, (run.inner_text(), box)
    # the actions still work from the narrow column
    row = page.locator(f"tr[data-schedule='{long_name}']")
    row.locator("button[value=pause]").click()
    expect(page.locator(".messagelist")).to_contain_text(f"Schedule {long_name} paused.")
    expect(row.locator(".badge.paused")).to_be_visible()
    assert_fits_phone(page, "admin-schedules-390.png")
