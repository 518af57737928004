# The outbox sweep reads queued runs sent long ago and not started from this index.

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("jobs", "0003_run_in_flight_includes_retry_wait"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(("published_at__isnull", False), ("state", "queued")),
                fields=["published_at"],
                name="run_sent_unstarted",
            ),
        ),
    ]
