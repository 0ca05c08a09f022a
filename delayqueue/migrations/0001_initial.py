from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="DelayedJob",
            fields=[
                (
                    "id",
                    models.AutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
            ],
            options={
                "verbose_name": "delayed job",
                "verbose_name_plural": "delayed jobs",
                "permissions": [
                    ("view_jobs", "Can see delayed jobs and queues"),
                    ("change_jobs", "Can run, reschedule, cancel, retry jobs and pause queues"),
                    ("delete_jobs", "Can delete dead jobs and purge dead queues"),
                ],
                "managed": False,
                "default_permissions": (),
            },
        ),
    ]
