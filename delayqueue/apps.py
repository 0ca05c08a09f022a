from django.apps import AppConfig


class DelayQueueConfig(AppConfig):
    name = "delayqueue"
    verbose_name = "Delayed jobs"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        # The system checks; and delayqueue's own Celery tasks, in every Celery app of a
        # Django project that installs delayqueue, autodiscovered or not (shared_task adds
        # them to each app). The periodic schedules of DELAYQUEUE["SCHEDULES"] are read
        # through delayqueue.periodic.declare.
        from delayqueue import checks, limit_checks, tasks  # noqa: F401
        from delayqueue.django_tasks import run  # noqa: F401 (the Django Tasks backend's)
        from delayqueue.integrations import checks as integration_checks  # noqa: F401
        from delayqueue.periodic import checks as schedule_checks  # noqa: F401
        from delayqueue.periodic import declare  # noqa: F401
        from delayqueue.periodic.monitored import watch_monitored

        watch_monitored()  # Sentry cron monitors of periodic jobs (docs/tracing.md)
