"""Template tags of the delayqueue admin: the due-time bar chart as server-rendered SVG, and
``breakable``, which lets long keys, task names and JSON wrap at their punctuation."""

from __future__ import annotations

import re
from typing import Any

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import ngettext

from delayqueue.services.dashboard import Bucket

register = template.Library()

# Where a long token may wrap: after punctuation that separates its parts
# ("close-order:1001", "app.tasks.close_order", '{"order_id": 7}').
_AFTER_PUNCTUATION = re.compile(r"(?<=[.,:;/_=&?@|)\]}>-])")


@register.filter(needs_autoescape=True)
def breakable(value: Any, autoescape: bool = True) -> SafeString:
    """``value`` as HTML with a <wbr> after each separating punctuation mark, so a browser
    wraps a long key or JSON there rather than mid-word (admin.css breaks anywhere only
    when a part alone is too long for its column). Each part is escaped on its own, so no
    <wbr> lands inside an entity."""
    parts = [p for p in _AFTER_PUNCTUATION.split("" if value is None else str(value)) if p]
    shown = [escape(part) if autoescape else part for part in parts]
    return mark_safe("<wbr>".join(shown))  # noqa: S308 - every part is escaped above


WIDTH, HEIGHT = 600, 160
LEFT, RIGHT, TOP, BOTTOM = 40, 6, 10, 22


def _num(value: float) -> str:
    """A coordinate as SVG wants it, whatever the active locale's decimal separator."""
    return f"{value:.2f}"


@register.inclusion_tag("admin/delayqueue/chart.html")
def due_chart(buckets: list[Bucket], title: str, chart_id: str, ticks: int = 6) -> dict[str, Any]:
    """Bars of jobs coming due per bucket, with a <title> per bar and a text summary for
    screen readers; colours come from the admin's CSS variables (static/delayqueue/admin.css)."""
    peak = max([b.count for b in buckets] + [0])
    scale = max(peak, 1)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    slot = plot_w / max(len(buckets), 1)
    every = max(1, len(buckets) // ticks)
    bars, labels = [], []
    for i, bucket in enumerate(buckets):
        height = bucket.count / scale * plot_h
        if bucket.count and height < 1:
            height = 1.0
        x = LEFT + i * slot
        if bucket.count:
            bars.append(
                {
                    "x": _num(x + slot * 0.1),
                    "y": _num(TOP + plot_h - height),
                    "w": _num(slot * 0.8),
                    "h": _num(height),
                    "bucket": bucket,
                }
            )
        if i % every == 0:
            labels.append({"x": _num(x + slot / 2), "text": bucket.label})
    total = sum(b.count for b in buckets)
    busiest = max(buckets, key=lambda b: b.count, default=None)
    summary = ngettext("%(total)d job in all", "%(total)d jobs in all", total) % {"total": total}
    if busiest is not None and busiest.count:
        summary += f"; the busiest bucket is {busiest.label} with {busiest.count}"
    return {
        "id": chart_id,
        "title": title,
        "summary": summary,
        "bars": bars,
        "labels": labels,
        "peak": peak,
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "top": TOP,
        "axis_y": TOP + plot_h,
        "axis_right": WIDTH - RIGHT,
        "label_y": HEIGHT - 6,
    }
