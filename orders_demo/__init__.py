"""Demo project for delayqueue: orders that close themselves when not paid in time."""

from .celery import app as celery_app

__all__ = ["celery_app"]
