from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0009_running_limits")]

    operations: list[migrations.operations.base.Operation] = []
