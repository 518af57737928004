# Schema changes of the engine area go here (hand-written operations), in order after 0001_initial.

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0001_initial")]

    operations: list[migrations.operations.base.Operation] = []
