from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0008_run_lateness")]

    operations: list[migrations.operations.base.Operation] = []
