from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0004_run_sent_unstarted")]

    operations: list[migrations.operations.base.Operation] = []
