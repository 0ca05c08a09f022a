"""The shop: list products, place orders, pay for them before they close."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import aget_object_or_404, get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST

from delayqueue import DelayQueueError
from delayqueue.services.job_detail import job_detail

from .forms import PlaceOrderForm
from .models import Order, Product
from .tasks import close_unpaid_order, send_payment_reminder
from .templatetags.order_tags import format_duration


def close_job_key(order_id: int) -> str:
    """The delayqueue key of the job that closes an order; one job per order."""
    return f"close-order:{order_id}"


CloseJobState = Literal["scheduled", "inflight", "dead", "none", "unknown"]
ERROR_CHARS = 160  # most characters of a dead job's error the order list shows


@dataclass(frozen=True)
class CloseJob:
    """What Redis says about the job that closes a pending order, as the shop shows it."""

    state: CloseJobState
    at: datetime | None = None  # scheduled: due; in flight: visibility deadline; dead: died
    seconds_left: float | None = None  # until ``at``, by Redis's clock
    attempts: int = 0
    max_attempts: int | None = None
    error: str = ""
    admin_url: str = ""

    @property
    def overdue(self) -> bool:
        return self.seconds_left is not None and self.seconds_left <= 0


def close_job_of(order: Order) -> CloseJob:
    """The state of ``order``'s close job, read from Redis (read-only) through delayqueue's
    job query: an operator may have cancelled, rescheduled or run it from the admin."""
    if not order.close_job_id:
        return CloseJob("none")
    queue = close_unpaid_order.delay_queue
    try:
        detail = job_detail(queue, order.close_job_id)
    except DelayQueueError as error:
        return CloseJob("unknown", error=str(error)[:ERROR_CHARS])
    if detail is None:
        return CloseJob("none")
    admin_url = reverse("admin:delayqueue_delayedjob_job", args=[queue, order.close_job_id])
    if detail.state is None:  # between two states at the moment of reading
        return CloseJob("unknown", error="changing state right now", admin_url=admin_url)
    at = seconds_left = None
    if detail.at is not None and detail.at.local is not None:
        at = datetime.fromtimestamp(detail.at.ms / 1000, tz=UTC)
        seconds_left = (detail.at.ms - detail.now_ms) / 1000
    error_lines = detail.error.strip().splitlines()
    why = [part for part in (detail.reason.strip(), error_lines[-1] if error_lines else "") if part]
    return CloseJob(
        detail.state,
        at=at,
        seconds_left=seconds_left,
        attempts=detail.attempts,
        max_attempts=detail.max_attempts,
        error=": ".join(why)[:ERROR_CHARS],
        admin_url=admin_url,
    )


def product_list(request: HttpRequest) -> HttpResponse:
    products = Product.objects.all()
    return render(
        request,
        "orders_demo/product_list.html",
        {"products": products, "payment_window": format_duration(settings.ORDER_PAYMENT_TIMEOUT)},
    )


def order_list(request: HttpRequest) -> HttpResponse:
    orders = Order.objects.select_related("product")[:50]
    rows = [(order, close_job_of(order) if order.is_pending else None) for order in orders]
    return render(request, "orders_demo/order_list.html", {"rows": rows})


@require_POST
def place_order(request: HttpRequest) -> HttpResponse:
    form = PlaceOrderForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a quantity between 1 and 1000.")
        return redirect("product_list")
    quantity = form.cleaned_data["quantity"]
    timeout = settings.ORDER_PAYMENT_TIMEOUT
    with transaction.atomic():
        product = get_object_or_404(
            Product.objects.select_for_update(), pk=form.cleaned_data["product_id"]
        )
        if product.stock < quantity:
            messages.error(request, f"Only {product.stock} × {product.name} left in stock.")
            return redirect("product_list")
        product.stock -= quantity
        product.save(update_fields=["stock"])
        order = Order.objects.create(
            product=product,
            quantity=quantity,
            payment_due_at=timezone.now() + timedelta(seconds=timeout),
        )
        # Written to Redis only once this transaction commits (on_commit defaults to True).
        job = close_unpaid_order.delay_for(order.id, seconds=timeout, key=close_job_key(order.id))
        order.close_job_id = job.id
        order.save(update_fields=["close_job_id"])
        # The same with Django's own Tasks API (TASKS in settings.py): a reminder half way.
        reminder_at = timezone.now() + timedelta(seconds=timeout / 2)
        send_payment_reminder.using(run_after=reminder_at).enqueue(order.id)
    messages.success(
        request,
        f"Order #{order.id} placed. Pay within {format_duration(timeout)} "
        "or it will be closed and the stock released.",
    )
    return redirect("order_list")


@require_POST
def pay_order(request: HttpRequest, order_id: int) -> HttpResponse:
    with transaction.atomic():
        order = get_object_or_404(Order.objects.select_for_update(), pk=order_id)
        if order.status == Order.Status.CLOSED:
            messages.error(request, f"Too late, order #{order.id} closed: it was not paid in time.")
            return redirect("order_list")
        if order.status == Order.Status.PAID:
            messages.info(request, f"Order #{order.id} is already paid.")
            return redirect("order_list")
        order.status = Order.Status.PAID
        order.paid_at = timezone.now()
        order.save(update_fields=["status", "paid_at"])
    # Cancel after the commit: should the job run anyway, it finds the order paid and leaves it.
    if close_unpaid_order.cancel(key=close_job_key(order.id)):
        messages.success(request, f"Order #{order.id} paid; its close job was cancelled.")
    else:
        messages.success(request, f"Order #{order.id} paid.")
    return redirect("order_list")


# ---- the same two steps as async views (served by orders_demo/asgi.py) ----------------------
#
# Django runs transactions in sync code only: the rows are written in sync_to_async, and the
# close job is scheduled with the async API once that transaction has committed.


@require_POST
async def place_order_async(request: HttpRequest) -> HttpResponse:
    form = PlaceOrderForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a quantity between 1 and 1000.")
        return redirect("product_list")
    quantity = form.cleaned_data["quantity"]
    timeout = settings.ORDER_PAYMENT_TIMEOUT
    product = await aget_object_or_404(Product, pk=form.cleaned_data["product_id"])
    order = await sync_to_async(_reserve)(product.pk, quantity, timeout)
    if order is None:
        messages.error(request, f"Not enough {product.name} left in stock.")
        return redirect("product_list")
    # Written at once: the order's transaction has committed (the module docs of
    # delayqueue.producer.async_api say what on_commit means in async code).
    job = await close_unpaid_order.adelay_for(
        order.id, seconds=timeout, key=close_job_key(order.id)
    )
    order.close_job_id = job.id
    await order.asave(update_fields=["close_job_id"])
    # Django's Tasks API, awaited: the backend's aenqueue (delayqueue's async API, no thread)
    reminder_at = timezone.now() + timedelta(seconds=timeout / 2)
    await send_payment_reminder.using(run_after=reminder_at).aenqueue(order.id)
    messages.success(
        request,
        f"Order #{order.id} placed. Pay within {format_duration(timeout)} "
        "or it will be closed and the stock released.",
    )
    return redirect("order_list")


def _reserve(product_id: int, quantity: int, timeout: int) -> Order | None:
    """Take the stock and create the order in one transaction; None when the stock is short."""
    with transaction.atomic():
        product = Product.objects.select_for_update().get(pk=product_id)
        if product.stock < quantity:
            return None
        product.stock -= quantity
        product.save(update_fields=["stock"])
        return Order.objects.create(
            product=product,
            quantity=quantity,
            payment_due_at=timezone.now() + timedelta(seconds=timeout),
        )


@require_POST
async def pay_order_async(request: HttpRequest, order_id: int) -> HttpResponse:
    order = await aget_object_or_404(Order, pk=order_id)
    status = await sync_to_async(_mark_paid)(order.pk)
    if status == Order.Status.CLOSED:
        messages.error(request, f"Too late, order #{order.id} closed: it was not paid in time.")
    elif status == Order.Status.PAID:
        messages.info(request, f"Order #{order.id} is already paid.")
    elif await close_unpaid_order.acancel(key=close_job_key(order.id)):
        messages.success(request, f"Order #{order.id} paid; its close job was cancelled.")
    else:
        messages.success(request, f"Order #{order.id} paid.")
    return redirect("order_list")


def _mark_paid(order_id: int) -> str | None:
    """Mark a pending order paid; the status it had when it was not pending, else None."""
    with transaction.atomic():
        order = Order.objects.select_for_update().get(pk=order_id)
        if order.status != Order.Status.PENDING:
            return str(order.status)
        order.status = Order.Status.PAID
        order.paid_at = timezone.now()
        order.save(update_fields=["status", "paid_at"])
    return None
