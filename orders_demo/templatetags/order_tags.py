from datetime import datetime

from django import template
from django.utils import timezone

register = template.Library()


def format_duration(seconds: int) -> str:
    """Say ``seconds`` the short way: "29 min 12 s", "30 min", "45 s"."""
    minutes, seconds = divmod(max(seconds, 0), 60)
    if not minutes:
        return f"{seconds} s"
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"


@register.filter
def time_left(deadline: datetime) -> str:
    """Say how long until ``deadline``, e.g. "29 min 12 s left"."""
    seconds = int((deadline - timezone.now()).total_seconds())
    if seconds <= 0:
        return "time is up"
    return f"{format_duration(seconds)} left"
