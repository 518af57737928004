# Schema changes of the api area go here (hand-written operations), in order after 0003_execution.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0003_execution")]

    operations: list[migrations.operations.base.Operation] = []
