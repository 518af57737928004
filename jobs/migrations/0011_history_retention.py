from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0010_target_limits")]

    operations: list[migrations.operations.base.Operation] = []
