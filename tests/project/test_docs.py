"""The README and docs/*.md run: every fenced Python sample compiles, every import in it
resolves against the installed packages, and each is executed against the test settings (its
settings checked by delayqueue's system checks, its schedules planned, its calls made on the
suite's Redis); every relative link and #anchor leads to a file and a heading that exist.

A sample is a fragment of a user's project: it runs in a namespace that gives it what it
assumes (an ``order``, a ``request``, ``delayqueue`` itself), one namespace per page, so a
page's later samples see its earlier ones. Modules of that project (``shop``, ``billing``,
``yourapp``) are small modules made here; a sample headed ``# shop/tasks.py`` also becomes
that module, so ``from shop.tasks import ...`` in the next sample finds what it defined."""

from __future__ import annotations

import ast
import asyncio
import importlib
import importlib.util
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from itertools import count
from pathlib import Path
from typing import Any

import django
import environ
import pytest
from asgiref.sync import sync_to_async
from celery import shared_task
from celery.schedules import crontab
from django.core.checks import ERROR, run_checks
from django.test import override_settings
from django.utils import timezone

import delayqueue
from delayqueue.engine import shards
from delayqueue.engine.keys import new_job_id, queue_keys
from delayqueue.periodic import declarations, planner
from tests.support import jobs

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
PROJECT_PACKAGES = ("shop", "billing", "yourapp", "proj")

# Samples only compiled and imported, each with why it cannot run here (page, a line of it).
NOT_RUN = {
    ("docs/deployment.md", "app.control.revoke(order.close_task_id)"): (
        "Celery's countdown, the 'before' of the move: it would publish to the suite's broker "
        "and broadcast a revoke to its workers"
    ),
}
if django.VERSION[:2] == (6, 0):
    NOT_RUN[("docs/tasks-backend.md", "max_attempts=8")] = (
        "Django 6.0's @task passes no extra arguments to the backend (the page says so)"
    )
# What a sample's run must end in, where that is not a plain return (page, a line of it).
EXPECTED_ERROR = {
    ("docs/topologies.md", "minutes=30, durable=True)"): delayqueue.NotDurable,  # no replica
}


@dataclass(frozen=True)
class Sample:
    page: str  # relative to the repository
    line: int
    source: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"

    def mentions(self, text: str) -> bool:
        return text in self.source


def python_samples() -> list[Sample]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in FENCE.finditer(text):
            if match.group(1) == "python":
                line = text.count("\n", 0, match.start(2)) + 1
                found.append(Sample(str(page.relative_to(ROOT)), line, match.group(2)))
    return found


SAMPLES = python_samples()


# ---- the user's project the samples assume --------------------------------------------------


@shared_task(name="shop.tasks.report")
def _report(kind: str = "daily") -> None:
    """The task the periodic-jobs page schedules by name."""


@shared_task(name="shop.tasks.release_holds")
def _release_holds() -> None:
    """The other task the periodic-jobs page schedules by name."""


@shared_task(name="billing.tasks.charge")
def _charge(customer_id: int, seconds: int = 0) -> None:
    """The Celery task (not a delayed task) the usage page enqueues by name."""


@delayqueue.delayed_task(queue="orders", name="docs.fixture.close_unpaid_order")
def _close_unpaid_order(order_id: int) -> None:
    """close_unpaid_order for the pages that use it without defining it."""


_ids = count(1001)
_runs = count()


class FakeOrder(types.SimpleNamespace):
    pass


class FakeOrders:
    """``Order.objects.create(...)``: an order with the next id (no table)."""

    def __init__(self) -> None:
        self.created: list[FakeOrder] = []

    def create(self, **fields: Any) -> FakeOrder:
        self.created.append(FakeOrder(id=next(_ids), **fields))
        return self.created[-1]


def assumed() -> dict[str, Any]:
    """What a page's samples use without defining it: the objects of the view or module the
    sample is a part of."""
    order = FakeOrder(id=next(_ids), close_task_id=None, close_job_id=None)
    alerts: list[str] = []
    return {
        "delayqueue": delayqueue,
        "delayed_task": delayqueue.delayed_task,
        "close_unpaid_order": _close_unpaid_order,
        "task": jobs.record,  # "any delayed task" in delayqueue.spec(task, ...)
        "job_id": new_job_id(),
        "order": order,
        "provider": "stripe",  # a payment provider, a limit_key's part
        "request": types.SimpleNamespace(user="customer"),
        "Order": types.SimpleNamespace(objects=FakeOrders()),
        "redirect": lambda *args: ("redirect", *args),
        "alert": alerts.append,
        "timezone": timezone,
        "timedelta": timedelta,
        "crontab": crontab,
        "env": environ.Env(),
        "sync_to_async": sync_to_async,
        "reserve_stock_and_create_order": lambda *args: order,
    }


@pytest.fixture
def project(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, types.ModuleType]]:
    """The user's packages as modules (``shop``, ``shop.tasks`` ...), for this test only; a
    registry of schedules and of sharded queues of this test's own."""
    modules: dict[str, types.ModuleType] = {}
    for package in PROJECT_PACKAGES:
        for name in [package, *(f"{package}.{m}" for m in ("apps", "models", "tasks", "views"))]:
            module = types.ModuleType(name)
            module.__path__ = []  # a package: its submodules import
            modules[name] = module
            monkeypatch.setitem(sys.modules, name, module)
    modules["shop.tasks"].report = _report  # type: ignore[attr-defined]
    modules["shop.tasks"].release_holds = _release_holds  # type: ignore[attr-defined]
    modules["billing.tasks"].charge = _charge  # type: ignore[attr-defined]
    monkeypatch.setattr(declarations, "_in_code", {})
    monkeypatch.setattr(shards, "_declared", {})
    yield modules


# ---- imports ----------------------------------------------------------------------------------


def _django_tasks_module() -> str:
    """Django 6's django.tasks, else the backport the samples name beside it."""
    return "django.tasks" if importlib.util.find_spec("django.tasks") else "django_tasks"


def _resolve(module: str, names: list[str]) -> None:
    if module.split(".")[0] in PROJECT_PACKAGES:
        return  # the user's own code: made by the fixture, checked when the sample runs
    if module == "django.tasks":
        module = _django_tasks_module()
    imported = importlib.import_module(module)
    for name in names:
        if name != "*" and not hasattr(imported, name):
            importlib.import_module(f"{module}.{name}")  # a submodule, else ImportError


def check_imports(sample: Sample) -> None:
    for node in ast.walk(ast.parse(sample.source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                _resolve(alias.name, [])
        elif isinstance(node, ast.ImportFrom):
            assert node.module and node.level == 0, f"{sample}: a relative import"
            _resolve(node.module, [alias.name for alias in node.names])


# ---- running ----------------------------------------------------------------------------------


def _module_of(sample: Sample) -> str | None:
    """The project module a sample is headed with (``# shop/tasks.py``), if any."""
    header = re.match(r"# ([\w/]+)\.py\b", sample.source)
    if header and header.group(1).split("/")[0] in PROJECT_PACKAGES:
        return header.group(1).replace("/", ".")
    return None


def _runnable(sample: Sample) -> str:
    """The sample's source as it runs on the installed Django (the samples say so in a
    comment: ``django_tasks`` on Django 5.2)."""
    if _django_tasks_module() == "django.tasks":
        return sample.source
    return sample.source.replace("from django.tasks import", "from django_tasks import")


def _literal_settings(sample: Sample, name: str) -> list[Any]:
    """The values a sample assigns to a setting at its top level."""
    return [
        ast.literal_eval(node.value)
        for node in ast.parse(sample.source).body
        if isinstance(node, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id == name for target in node.targets)
    ]


def _writes_delayqueue(sample: Sample) -> bool:
    """Whether the sample assigns DELAYQUEUE or one of its entries."""
    for node in ast.parse(sample.source).body:
        for target in node.targets if isinstance(node, ast.Assign) else []:
            if isinstance(target, ast.Subscript):
                target = target.value
            if isinstance(target, ast.Name) and target.id == "DELAYQUEUE":
                return True
    return False


def check_settings(sample: Sample, namespace: dict[str, Any]) -> None:
    """The DELAYQUEUE a sample wrote passes delayqueue's system checks (its SCHEDULES
    included: their tasks exist, their rules parse)."""
    if not _writes_delayqueue(sample):
        return
    value = {"REDIS_URL": "redis://127.0.0.1:6379/0", **namespace["DELAYQUEUE"]}
    with override_settings(DELAYQUEUE=value):
        errors = [
            f"{m.id}: {m.msg}"
            for m in run_checks()
            if m.level >= ERROR and (m.id or "").startswith("delayqueue.")
        ]
    assert errors == [], f"{sample}: {errors}"


def run_sample(sample: Sample, namespace: dict[str, Any]) -> None:
    """Run the sample statement by statement: the one that holds an EXPECTED_ERROR line must
    raise that error, every other one must not raise."""
    source = _runnable(sample)
    lines = source.splitlines()
    for statement in ast.parse(source).body:
        assert statement.end_lineno is not None
        text = "\n".join(lines[statement.lineno - 1 : statement.end_lineno])
        code = compile(ast.Module([statement], type_ignores=[]), str(sample), "exec")
        expected = [
            error for (page, line), error in EXPECTED_ERROR.items()
            if sample.page == page and line in text
        ]  # fmt: skip
        if expected:
            with pytest.raises(expected[0]):
                exec(code, namespace)
        else:
            exec(code, namespace)


def run_page(page: str, project: dict[str, types.ModuleType]) -> list[str]:
    """Run every sample of ``page`` in one namespace; the samples that ran."""
    samples = [s for s in SAMPLES if s.page == page]
    name = f"docs_samples.{Path(page).stem.replace('-', '_')}_{next(_runs)}"  # tasks' names
    namespace: dict[str, Any] = {"__name__": name, **assumed()}
    tasks = [v for s in samples for v in _literal_settings(s, "TASKS")]
    ran = []
    with override_settings(**({"TASKS": tasks[-1]} if tasks else {})):
        for sample in samples:
            check_imports(sample)
            compile(_runnable(sample), str(sample), "exec")
            if any(sample.page == p and sample.mentions(line) for p, line in NOT_RUN):
                continue
            run_sample(sample, namespace)
            module = _module_of(sample)
            if module:
                vars(project[module]).update(
                    {k: v for k, v in namespace.items() if not k.startswith("__")}
                )
            check_settings(sample, namespace)
            ran.append(str(sample))
    declared = [item.name for item in declarations.declared()]
    if declared:  # the page's periodic tasks plan, each once
        result = planner.reconcile()
        assert result.failed == {}, result.failed
        assert sorted(result.planned) == sorted(declared)
    return ran


PAGES_WITH_SAMPLES = sorted({s.page for s in SAMPLES})


def test_the_readme_and_docs_have_python_samples() -> None:
    assert "README.md" in PAGES_WITH_SAMPLES and len(SAMPLES) >= 20
    for page, line in [*NOT_RUN, *EXPECTED_ERROR]:  # each names a sample that still exists
        assert any(s.page == page and s.mentions(line) for s in SAMPLES), (page, line)


@pytest.mark.django_db(transaction=True)  # a call outside atomic() writes at once
@pytest.mark.parametrize("page", PAGES_WITH_SAMPLES)
def test_every_python_sample_runs(page: str, project: dict[str, types.ModuleType]) -> None:
    ran = run_page(page, project)
    expected = [
        str(s)
        for s in SAMPLES
        if s.page == page and not any(s.page == p and s.mentions(line) for p, line in NOT_RUN)
    ]
    assert ran == expected


@pytest.mark.django_db(transaction=True)  # the view's atomic() commits
def test_the_readme_first_delayed_job_is_scheduled_at_commit_and_cancelled_on_payment(
    project: dict[str, types.ModuleType], r: Any
) -> None:
    """The README's views, called: placing an order schedules its close job in 30 minutes
    when the transaction commits; paying cancels it."""
    run_page("README.md", project)
    views = vars(project["shop.views"])
    orders, request = views["Order"].objects, types.SimpleNamespace(user="customer")
    scheduled = queue_keys("orders").scheduled
    views["place_order"](request)
    [order] = orders.created
    [(job_id, due_ms)] = r.zrange(scheduled, 0, -1, withscores=True)
    seconds, micros = r.time()
    assert 29 * 60_000 < due_ms - (seconds * 1000 + micros // 1000) <= 30 * 60_000
    assert r.hget(queue_keys("orders").dedupe, f"close-order:{order.id}") == job_id
    views["pay_order"](request, order.id)
    assert r.zcard(scheduled) == 0, "paying cancelled the close job"


def test_the_async_sample_schedules_from_an_async_view(
    project: dict[str, types.ModuleType], r: Any
) -> None:
    namespace: dict[str, Any] = {"__name__": "docs_samples.async", **assumed()}
    [sample] = [s for s in SAMPLES if s.page == "docs/async.md"]
    exec(compile(sample.source, str(sample), "exec"), namespace)
    asyncio.run(namespace["place_order"](namespace["request"]))
    assert r.zcard(queue_keys("orders").scheduled) == 1


# ---- links ------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*#*$", re.M)


def _prose(text: str) -> str:
    """The page without its fenced blocks and inline code (no links live there)."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """GitHub's ids of the page's headings: lower case, punctuation but - and _ dropped,
    spaces to -, a repeated one numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", page.read_text())):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def relative_links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(_prose(page.read_text()))
        if not re.match(r"[a-z]+:", target)
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (linked.suffix != ".md" or anchor not in anchors(linked)):
            broken.append(f"{target}: no heading #{anchor}")
    assert broken == []


def test_the_docs_index_lists_every_page_and_the_readme_links_the_index() -> None:
    index = ROOT / "docs" / "index.md"
    listed = {(index.parent / t.partition("#")[0]).resolve() for t in relative_links(index)}
    pages = {p.resolve() for p in (ROOT / "docs").iterdir() if p.name != "index.md"}
    assert pages - listed == set()
    assert "docs/index.md" in relative_links(ROOT / "README.md")


def test_the_link_checker_finds_a_broken_link_and_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## `DISPATCH_AHEAD` (ms)\n\ntext\n")
    page = tmp_path / "b.md"
    page.write_text("[x](a.md#dispatch_ahead-ms) [y](a.md#nope) [z](gone.md) `[q](no.md)`\n")
    assert relative_links(page) == ["a.md#dispatch_ahead-ms", "a.md#nope", "gone.md"]
    assert anchors(tmp_path / "a.md") == {"top", "dispatch_ahead-ms"}
