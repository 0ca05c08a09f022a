"""What ``@delayed_task`` returns: a proxy of the shared task that follows the current Celery
app, as ``shared_task``'s own does, and remembers the task it found per app."""

from __future__ import annotations

from typing import Any

from celery._state import get_current_app
from celery.local import Proxy


def per_app(shared: Any) -> Any:
    """Celery's proxy of a shared task, resolved once per current app: a proxy like the one
    ``shared_task`` returns (a subclass, following the current app the same way), but
    one that remembers the task it found in the app's registry instead of looking it up and
    working out its name again on every attribute of every ``delay_for``. The
    first look-up per app is Celery's own, which finalizes the app as it always does."""
    found: tuple[Any, Any] = (None, None)  # (app, its task): one tuple, read at once

    def current_task() -> Any:
        nonlocal found
        app, task = found
        current = get_current_app()
        if app is not current:
            task = shared._get_current_object()
            found = (current, task)
        return task

    return _TaskProxy(current_task)


class _TaskProxy(Proxy):
    """Celery's Proxy, asking its resolver straight away: Celery's own first looks for a
    werkzeug-style local on it (a failed ``hasattr`` per attribute)."""

    __slots__ = ()

    def _get_current_object(self) -> Any:
        return object.__getattribute__(self, "_Proxy__local")()

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "_Proxy__local")(), name)
