"""The admin's handle on delayed jobs: a model with no table, there for the sidebar entry and
the permission rows. The jobs themselves live in Redis (see browse.py and operations.py)."""

from __future__ import annotations

from django.db import models


class NoRows(models.Manager["DelayedJob"]):
    """Every query is empty and never reaches the database, which has no table for the model
    (so ``/admin/r/<content type>/<id>/`` and other generic lookups are a 404, not a 500)."""

    def get_queryset(self) -> models.QuerySet[DelayedJob]:
        return super().get_queryset().none()


class DelayedJob(models.Model):
    """Never queried: ``managed = False`` and no table. Only its permissions are used."""

    objects = NoRows()

    class Meta:
        managed = False
        default_permissions = ()
        base_manager_name = "objects"
        permissions = [
            ("view_jobs", "Can see delayed jobs and queues"),
            ("change_jobs", "Can run, reschedule, cancel, retry jobs and pause queues"),
            ("delete_jobs", "Can delete dead jobs and purge dead queues"),
            ("pause_schedules", "Can pause and resume periodic schedules"),
            ("run_schedules", "Can run a periodic schedule's task now"),
        ]
        verbose_name = "delayed job"
        verbose_name_plural = "delayed jobs"

    def __str__(self) -> str:
        return f"delayed job {self.pk}"
