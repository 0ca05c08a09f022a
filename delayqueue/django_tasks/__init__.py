"""delayqueue as a backend of Django's Tasks framework (``django.tasks``, or the django-tasks
backport on Django 5.2): ``delayqueue.tasks_backend.DelayQueueBackend``.

- ``compat.py``: the framework, from wherever it is installed;
- ``backend.py``: the backend (enqueue and get_result, its OPTIONS);
- ``task.py``: its ``task_class``, a Django ``Task`` with per-task retry options;
- ``results.py``: a ``TaskResult`` from what Redis holds (``engine/task_results.py``);
- ``run.py``: ``delayqueue.run_django_task``, the Celery task every job of a Django task runs
  (import-safe without the framework: it is registered in every Celery worker);
- ``attempts.py``: one attempt of such a job on the Celery worker.

Nothing is imported here: importing ``run`` must not need the framework."""
