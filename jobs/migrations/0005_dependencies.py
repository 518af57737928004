# Dependencies between jobs: edges of a tenant's job DAG, dependent jobs without a schedule of
# their own, runs created by the hand-off (trigger upstream, state upstream_failed) and the
# parent runs each was decided by.

import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

from jobs.migrations._handoff_0005 import INSTALL_SQL as HANDOFF_INSTALL_SQL
from jobs.migrations._handoff_0005 import UNINSTALL_SQL as HANDOFF_UNINSTALL_SQL


class Migration(migrations.Migration):
    dependencies = [("jobs", "0004_run_sent_unstarted")]

    operations = [
        migrations.CreateModel(
            name="JobDependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("created_at", models.DateTimeField()),
                (
                    "child",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="parent_edges",
                        to="jobs.job",
                    ),
                ),
                (
                    "parent",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="child_edges",
                        to="jobs.job",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="job_edges",
                        to="jobs.tenant",
                    ),
                ),
            ],
            options={
                "verbose_name": "job dependency",
                "verbose_name_plural": "job dependencies",
                "indexes": [models.Index(fields=["child"], name="job_dependency_child")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("parent", "child"), name="job_dependency_unique"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("parent", models.F("child")), _negated=True),
                        name="job_dependency_not_self",
                    ),
                ],
            },
        ),
        migrations.RemoveConstraint(model_name="job", name="job_schedule_fields_match_kind"),
        migrations.RemoveConstraint(model_name="job", name="job_active_has_next_fire"),
        migrations.RemoveConstraint(model_name="job", name="job_kind_valid"),
        migrations.RemoveConstraint(model_name="jobrun", name="run_state_valid"),
        migrations.AddField(
            model_name="job",
            name="trigger_rule",
            field=models.CharField(
                choices=[
                    ("all_success", "All parents succeeded"),
                    ("all_done", "All parents done"),
                ],
                db_default="all_success",
                default="all_success",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="jobrun",
            name="upstream_run_ids",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.UUIDField(),
                blank=True,
                db_default=models.Value(
                    [],
                    output_field=django.contrib.postgres.fields.ArrayField(
                        base_field=models.UUIDField(), size=None
                    ),
                ),
                default=list,
                size=None,
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="kind",
            field=models.CharField(
                choices=[
                    ("once", "One-off"),
                    ("cron", "Cron"),
                    ("interval", "Interval"),
                    ("dependent", "After its parents"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="jobrun",
            name="state",
            field=models.CharField(
                choices=[
                    ("pending", "Pending"),
                    ("queued", "Queued"),
                    ("running", "Running"),
                    ("retry_wait", "Waiting to retry"),
                    ("succeeded", "Succeeded"),
                    ("failed", "Failed"),
                    ("dead", "Dead-lettered"),
                    ("skipped", "Skipped"),
                    ("missed", "Missed"),
                    ("cancelled", "Cancelled"),
                    ("upstream_failed", "Upstream failed"),
                ],
                max_length=16,
            ),
        ),
        migrations.AlterField(
            model_name="jobrun",
            name="trigger",
            field=models.CharField(
                choices=[
                    ("schedule", "Schedule"),
                    ("manual", "Triggered manually"),
                    ("catch_up", "Catch-up"),
                    ("backfill", "Backfill"),
                    ("upstream", "After its parents"),
                ],
                default="schedule",
                max_length=16,
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("kind", "once"), ("run_at__isnull", False)),
                    models.Q(("cron_expression__gt", ""), ("kind", "cron")),
                    models.Q(
                        ("anchor_at__isnull", False),
                        ("interval_seconds__gte", 1),
                        ("kind", "interval"),
                    ),
                    ("kind", "dependent"),
                    _connector="OR",
                ),
                name="job_schedule_fields_match_kind",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("status", "active"), _negated=True),
                    ("next_fire_at__isnull", False),
                    ("kind", "dependent"),
                    _connector="OR",
                ),
                name="job_active_has_next_fire",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    models.Q(("kind", "dependent"), _negated=True),
                    ("next_fire_at__isnull", True),
                    _connector="OR",
                ),
                name="job_dependent_has_no_fire",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("kind__in", ["once", "cron", "interval", "dependent"])),
                name="job_kind_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("trigger_rule__in", ["all_success", "all_done"])),
                name="job_trigger_rule_valid",
            ),
        ),
        migrations.AddConstraint(
            model_name="jobrun",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "state__in",
                        [
                            "pending",
                            "queued",
                            "running",
                            "retry_wait",
                            "succeeded",
                            "failed",
                            "dead",
                            "skipped",
                            "missed",
                            "cancelled",
                            "upstream_failed",
                        ],
                    )
                ),
                name="run_state_valid",
            ),
        ),
        # The hand-off: row triggers creating the children's runs in the transaction of the
        # parent's deciding outcome (jobs/services/dag_handoff.py).
        migrations.RunSQL(HANDOFF_INSTALL_SQL, HANDOFF_UNINSTALL_SQL),
    ]
