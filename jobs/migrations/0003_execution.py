# Schema changes of the execution area go here (hand-written operations), in order after 0002_engine.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0002_engine")]

    operations: list[migrations.operations.base.Operation] = []
