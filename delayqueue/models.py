"""The admin's handles on delayed jobs and periodic schedules: models with no table, there for
the admin index's entries and the permission rows. The jobs and schedules themselves live in
Redis (see delayqueue/services/)."""

from __future__ import annotations

from typing import TypeVar

from django.db import models

_M = TypeVar("_M", bound=models.Model)


class NoRows(models.Manager[_M]):
    """Every query is empty and never reaches the database, which has no table for the model
    (so ``/admin/r/<content type>/<id>/`` and other generic lookups are a 404, not a 500)."""

    def get_queryset(self) -> models.QuerySet[_M]:
        return super().get_queryset().none()


class DelayedJob(models.Model):
    """Never queried: ``managed = False`` and no table. Only its permissions are used."""

    objects = NoRows["DelayedJob"]()

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


class PeriodicSchedule(models.Model):
    """The admin index's entry for the Schedules page; never queried, no table. It has no
    permission rows of its own: the page's (``view_jobs``, ``pause_schedules``,
    ``run_schedules``) stay on DelayedJob, where grants made before this entry existed are."""

    objects = NoRows["PeriodicSchedule"]()

    class Meta:
        managed = False
        default_permissions = ()
        base_manager_name = "objects"
        verbose_name = "periodic schedule"
        verbose_name_plural = "periodic schedules"

    def __str__(self) -> str:
        return f"periodic schedule {self.pk}"
