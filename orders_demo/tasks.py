"""Delayed jobs of the demo: closing orders nobody paid for, and a periodic report of
orders still pending past their payment window."""

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from delayqueue import delayed_task

# Django's @task: django.tasks.task on Django 6, django_tasks.task (the backport) on 5.2; the
# demo runs on both, so it takes whichever is installed, as delayqueue's backend does.
from delayqueue.django_tasks.compat import task

from .models import Order, Product

logger = logging.getLogger(__name__)


@delayed_task(queue="orders", max_attempts=5)
def close_unpaid_order(order_id: int) -> None:
    """Close an order that was not paid in time and give its stock back. Idempotent."""
    with transaction.atomic():
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            logger.info("Order %s no longer exists; nothing to close", order_id)
            return
        if order.status != Order.Status.PENDING:
            logger.info("Order %s is %s; leaving it alone", order_id, order.status)
            return
        order.status = Order.Status.CLOSED
        order.closed_at = timezone.now()
        order.save(update_fields=["status", "closed_at"])
        Product.objects.filter(pk=order.product_id).update(stock=F("stock") + order.quantity)
    logger.info(
        "Closed unpaid order %s and returned %s to the stock of product %s",
        order_id,
        order.quantity,
        order.product_id,
    )


@delayed_task(queue="orders")
def report_overdue_orders() -> int:
    """Every minute (DELAYQUEUE["SCHEDULES"] in settings.py: no beat), say how many orders
    are still pending past their payment window (their close job should have run; a number
    above 0 for long means the workers are not keeping up). Returns the count."""
    cutoff = timezone.now() - timedelta(seconds=settings.ORDER_PAYMENT_TIMEOUT + 60)
    overdue = Order.objects.filter(status=Order.Status.PENDING, created_at__lt=cutoff).count()
    if overdue:
        logger.warning("%s orders are pending past their payment window", overdue)
    else:
        logger.info("No order is pending past its payment window")
    return overdue


@task(queue_name="orders")
def send_payment_reminder(order_id: int) -> str:
    """A Django task (Django's Tasks framework on delayqueue: TASKS in settings.py): half way
    through the payment window, remind the customer of an order still unpaid."""
    order = Order.objects.filter(pk=order_id).first()
    if order is None or not order.is_pending:
        return "nothing to remind"
    logger.info("Payment reminder for order %s: pay by %s", order_id, order.payment_due_at)
    return "reminded"
