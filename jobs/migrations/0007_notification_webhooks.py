from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("jobs", "0006_decision_reasons")]

    operations: list[migrations.operations.base.Operation] = []
