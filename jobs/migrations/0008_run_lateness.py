from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("jobs", "0007_notification_webhooks")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="jobrun",
            name="start_lag",
            field=models.DurationField(blank=True, null=True),
        ),
    ]
