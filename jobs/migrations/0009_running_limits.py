from django.db import migrations, models

# Running-concurrency limits (docs/limits.md, "Running concurrency"): a limit per tenant and
# per job (null: none), the limit that parked a run, and the indexes the release reads a
# tenant's and a job's parked runs by, oldest firing first. Every column is nullable or has a
# constant default, so adding it rewrites no table.


class Migration(migrations.Migration):
    dependencies = [("jobs", "0008_run_lateness")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="tenant",
            name="max_running_runs",
            field=models.PositiveIntegerField(
                blank=True,
                help_text=(
                    "Runs of this tenant running at once, across all workers; empty: no limit."
                ),
                null=True,
            ),
        ),
        migrations.AddConstraint(
            model_name="tenant",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("max_running_runs__isnull", True),
                    ("max_running_runs__gte", 1),
                    _connector="OR",
                ),
                name="tenant_max_running_runs_positive",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="max_running_runs",
            field=models.PositiveIntegerField(blank=True, null=True),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("max_running_runs__isnull", True),
                    ("max_running_runs__gte", 1),
                    _connector="OR",
                ),
                name="job_max_running_runs_positive",
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="held_by",
            field=models.CharField(blank=True, db_default="", default="", max_length=16),
        ),
        migrations.AddIndex(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(
                    ("held_by", "tenant_running"), ("state__in", ["queued", "retry_wait"])
                ),
                fields=["tenant", "scheduled_for", "id"],
                name="run_held_by_tenant",
            ),
        ),
        migrations.AddIndex(
            model_name="jobrun",
            index=models.Index(
                condition=models.Q(
                    ("held_by", "job_running"), ("state__in", ["queued", "retry_wait"])
                ),
                fields=["job", "scheduled_for", "id"],
                name="run_held_by_job",
            ),
        ),
    ]
