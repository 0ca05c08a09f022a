"""Django's Tasks framework from wherever it is installed: ``django.tasks`` (Django 6.0 on)
or the django-tasks backport (``django_tasks``; Django 5.2, ``pip install
delayqueue[tasks]``). The one module that knows there are two; the rest of
``delayqueue.django_tasks`` imports the framework from here.

The two have the same API (``Task``, ``TaskResult``, ``TaskResultStatus``,
``TaskContext``, ``TaskError`` with ``exception_class_path`` and ``traceback``, a backend's
``task_class``, ``get_result`` / ``aget_result``, ``worker_ids``, the three signals). What
differs, and is named here once:

- the invalid-task error: ``InvalidTask`` in Django, ``InvalidTaskError`` in the backport;
- the bad-backend error: ``InvalidTaskBackend`` / ``InvalidTaskBackendError``;
- ``normalize_json``: ``django.utils.json`` in Django, ``django_tasks.utils`` in the backport;
- the framework's own receivers of ``task_started`` and ``task_finished``, which log a line
  each (``heard``): on the ``django.tasks`` logger in Django, ``django_tasks`` in the backport.

When Django has ``django.tasks``, it is used even if the backport is installed too (tasks
made with the backport's ``@task`` then belong to the backport's own backends). mypy reads
the backport's annotations (Django's own module has none)."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django_tasks import signals as _framework_signals
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    try:
        from django.tasks import (
            Task,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
    except ImportError:
        try:
            from django_tasks import (
                TaskContext,
                TaskResult,
                TaskResultStatus,
                task,
                task_backends,
            )
        except ImportError:
            raise ImportError(
                "delayqueue's Django Tasks backend needs Django's Tasks framework: Django 6.0 "
                "or later has it (django.tasks); on Django 5.2 install the backport, "
                "pip install 'delayqueue[tasks]' (django-tasks)"
            ) from None
        from django_tasks import signals as _framework_signals
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    else:
        from django.tasks import signals as _framework_signals
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import (
            InvalidTask,
            InvalidTaskBackend,
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

# The framework's own receiver of each signal a run sends (None: this version has none).
_LOG_RECEIVERS: dict[Any, Any] = {  # (a Signal hashes as itself)
    task_started: getattr(_framework_signals, "log_task_started", None),
    task_finished: getattr(_framework_signals, "log_task_finished", None),
}
_LOGGER: Any = getattr(_framework_signals, "logger", None)


def heard(signal: Any, level: int) -> bool:
    """Whether sending ``signal`` (``task_started``, ``task_finished``) about a result whose
    log line has ``level`` (INFO: a start, a success) can do anything: False when it has
    no receiver, or none but the framework's own, whose line its logger would drop. Then
    not sending it is the same as sending it (Django's semantics kept), and the run need
    not build the ``TaskResult`` it would carry. A signal anyone else listens to is sent."""
    held = signal.receivers
    if not held:
        return False
    own = _LOG_RECEIVERS.get(signal)
    if len(held) != 1 or own is None or _LOGGER is None:
        return True
    receiver = held[0][1]  # ((receiver id, sender id), receiver or a weak reference, ...)
    if isinstance(receiver, weakref.ReferenceType):
        receiver = receiver()
    return receiver is not own or bool(_LOGGER.isEnabledFor(level))


__all__ = [
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "heard",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
