"""Archived days of run history: where each day's files are, and how far its archive got
(docs/history.md, "Archive").

A day's row is written in the transaction that detaches its partitions, so a day whose runs
left the runs table always has a row, and the row's step says what the next archive pass
still has to do: export the detached tables, verify the files, drop the tables. Each step
moves the row forward with a compare-and-set on its step, so two processes never do a step
twice (docs/architecture.md, Invariants).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class ArchiveStep(models.TextChoices):
    # The day's partitions are detached: its runs are out of the hot tables, still in
    # PostgreSQL as the tables named below.
    DETACHED = "detached", "Detached"
    # The files and manifest are written (not yet checked).
    EXPORTED = "exported", "Exported"
    # The files were re-read and match the detached tables row for row.
    VERIFIED = "verified", "Verified"
    # The detached tables are dropped: the day lives in its archive only.
    ARCHIVED = "archived", "Archived"


class ArchivedDay(models.Model):
    """One UTC day of ``scheduled_for`` whose runs left the runs table for the archive."""

    day = models.DateField(primary_key=True)
    step = models.CharField(max_length=16, choices=ArchiveStep.choices)
    # The detached partitions, while they exist (until the step is archived).
    run_table = models.CharField(max_length=63)
    attempt_table = models.CharField(max_length=63)
    # The closed dead letters of the day's runs, moved out of jobs_deadletter at the detach.
    dead_letter_table = models.CharField(max_length=63)
    # The archive's directory (manifest.json and one file per table) and its manifest's
    # SHA-256, once written.
    directory = models.CharField(max_length=1024)
    manifest_sha256 = models.CharField(max_length=64, blank=True, default="")
    runs = models.BigIntegerField(default=0)
    attempts = models.BigIntegerField(default=0)
    dead_letters = models.BigIntegerField(default=0)
    detached_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "archived day"
        constraints = [
            models.CheckConstraint(
                condition=Q(step__in=ArchiveStep.values), name="archived_day_step_valid"
            ),
            models.CheckConstraint(
                condition=Q(step="detached") | ~Q(manifest_sha256=""),
                name="archived_day_exported_has_manifest",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day.isoformat()} [{self.step}]"
