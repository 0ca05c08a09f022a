from django import template

register = template.Library()


def format_duration(seconds: int) -> str:
    """Say ``seconds`` the short way: "29 min 12 s", "30 min", "45 s"."""
    minutes, seconds = divmod(max(seconds, 0), 60)
    if not minutes:
        return f"{seconds} s"
    return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"


@register.filter
def in_duration(seconds: float | None) -> str:
    """Say how long until something ``seconds`` from now, e.g. "in 29 min 12 s"."""
    if seconds is None:
        return ""
    return f"in {format_duration(max(int(seconds), 0))}"
