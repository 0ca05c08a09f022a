from django.apps import AppConfig


class DelayQueueConfig(AppConfig):
    name = "delayqueue"
    verbose_name = "Delayed jobs"
    default_auto_field = "django.db.models.AutoField"

    def ready(self) -> None:
        from delayqueue import checks  # noqa: F401  (registers the system checks)
