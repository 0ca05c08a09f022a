"""The Celery app delayqueue hands jobs to and looks tasks up in: ``DELAYQUEUE["CELERY_APP"]``
when set, else Celery's current app."""

from __future__ import annotations

from celery import Celery, Task, current_app
from django.utils.module_loading import import_string

from delayqueue.conf import get_settings
from delayqueue.errors import UnknownTask


def get_celery_app() -> Celery:
    path = get_settings().celery_app
    if path:
        module, _, attribute = path.partition(":")
        configured: Celery = import_string(f"{module}.{attribute or 'app'}")
        return configured
    current: Celery = current_app._get_current_object()  # type: ignore[attr-defined]
    return current


def resolve_task(task: Task | str) -> tuple[str, Task | None]:
    """The registered name of a task (object or name), or UnknownTask."""
    if isinstance(task, Task):
        return str(task.name), task
    if not isinstance(task, str) or not task:
        raise UnknownTask(f"expected a Celery task or a task name, not {task!r}")
    app = get_celery_app()
    if task not in app.tasks:
        app.loader.import_default_modules()  # runs autodiscover_tasks() in a web process
    if task not in app.tasks:
        raise UnknownTask(f"no Celery task is registered as {task!r}")
    return task, app.tasks[task]
