from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built beside the index it replaces, both CONCURRENTLY: the jobs table may hold tens of
    # millions of rows, and the engine's horizon reads must keep an index meanwhile.
    atomic = False

    dependencies = [("jobs", "0013_archived_days")]

    operations: list[migrations.operations.base.Operation] = [
        # The horizon's keyset (next_fire_at, id): a refresh pages through jobs tied at one
        # instant (docs/engine.md, "Selection").
        AddIndexConcurrently(
            model_name="job",
            index=models.Index(
                condition=models.Q(("status", "active")),
                fields=["partition", "next_fire_at", "id"],
                name="job_due_keyset",
            ),
        ),
        RemoveIndexConcurrently(model_name="job", name="job_due_by_partition"),
    ]
