from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0005_dependencies")]

    operations: list[migrations.operations.base.Operation] = []
