from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("delayqueue", "0002_no_rows_manager"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="delayedjob",
            options={
                "base_manager_name": "objects",
                "default_permissions": (),
                "managed": False,
                "permissions": [
                    ("view_jobs", "Can see delayed jobs and queues"),
                    ("change_jobs", "Can run, reschedule, cancel, retry jobs and pause queues"),
                    ("delete_jobs", "Can delete dead jobs and purge dead queues"),
                    ("pause_schedules", "Can pause and resume periodic schedules"),
                    ("run_schedules", "Can run a periodic schedule's task now"),
                ],
                "verbose_name": "delayed job",
                "verbose_name_plural": "delayed jobs",
            },
        ),
    ]
