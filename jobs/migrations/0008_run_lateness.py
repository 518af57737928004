from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0007_notification_webhooks")]

    operations: list[migrations.operations.base.Operation] = []
