"""The demo's ASGI application (``orders_demo/asgi.py``) on the suite's settings, with a
few async views of the suite's own beside the demo's pages: what test_async_asgi.py serves
with uvicorn. ``/probe/schedule`` and ``/probe/cancel`` use the async API on the suite's
``record`` task; ``/probe/ping`` answers without Redis and says how many schedule views
are waiting on Redis at that moment (their coroutines started and not finished)."""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

from django.conf import settings  # noqa: E402
from django.http import HttpRequest, JsonResponse  # noqa: E402
from django.urls import path  # noqa: E402
from django.views.decorators.csrf import csrf_exempt  # noqa: E402

from orders_demo.asgi import application  # noqa: E402
from orders_demo.urls import urlpatterns as demo_urlpatterns  # noqa: E402
from tests.support import jobs  # noqa: E402

settings.ROOT_URLCONF = __name__  # the demo's pages and the probes below

waiting = 0  # schedule views between their start and their reply


@csrf_exempt
async def schedule(request: HttpRequest) -> JsonResponse:
    global waiting
    waiting += 1
    try:
        job = await jobs.record.adelay_for(
            request.GET["tag"], seconds=int(request.GET["ms"]) / 1000, key=request.GET.get("key")
        )
    finally:
        waiting -= 1
    assert job.due_at is not None
    return JsonResponse({"id": job.id, "due_ms": round(job.due_at.timestamp() * 1000)})


@csrf_exempt
async def cancel(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"cancelled": await jobs.record.acancel(request.GET["id"])})


async def ping(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"waiting": waiting})


urlpatterns = [
    *demo_urlpatterns,
    path("probe/schedule", schedule),
    path("probe/cancel", cancel),
    path("probe/ping", ping),
]

__all__ = ["application"]
