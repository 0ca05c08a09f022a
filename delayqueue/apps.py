from django.apps import AppConfig


class DelayQueueConfig(AppConfig):
    name = "delayqueue"
    verbose_name = "Delayed jobs"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        # The system checks; and delayqueue's own Celery tasks, in every Celery app of a
        # Django project that installs delayqueue, autodiscovered or not (shared_task adds
        # them to each app).
        from delayqueue import checks, tasks  # noqa: F401
