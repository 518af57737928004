from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # CREATE INDEX CONCURRENTLY: the runs table may hold tens of millions of rows, and a plain
    # CREATE INDEX would block every claim and outcome while it is built.
    atomic = False

    dependencies = [("jobs", "0010_target_limits")]

    operations: list[migrations.operations.base.Operation] = [
        # The admin's run list, newest firing first (docs/history.md, "Readers").
        AddIndexConcurrently(
            model_name="jobrun",
            index=models.Index(fields=["-scheduled_for", "-id"], name="run_by_firing"),
        ),
        # Retention of closed dead letters by their last replay.
        AddIndexConcurrently(
            model_name="deadletter",
            index=models.Index(
                condition=models.Q(("replayed_at__isnull", False)),
                fields=["replayed_at"],
                name="dead_letter_replayed",
            ),
        ),
    ]
