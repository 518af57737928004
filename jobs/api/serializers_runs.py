"""Run, attempt, dead-letter, preview, page and error shapes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.api.fields import AwareDateTimeField, SecondsOutField, StrictQuery, utc_iso
from jobs.api.serializers import JobOut
from jobs.api.serializers_figures import JobFiguresOut, figures_body
from jobs.models import JobStatus
from jobs.selectors import PREVIEW_MAX
from jobs.services.run_results import result_decoded, results_of_run
from jobs.states import RunState


class AttemptResultOut(serializers.Serializer[Any]):
    """The attempt's stored result (django-celery-results), jobs/services/run_results.py."""

    task_id = serializers.CharField(
        help_text="'<run_id>:<attempt>': Celery's AsyncResult(task_id) reads the same result."
    )
    status = serializers.CharField(help_text="SUCCESS, FAILURE or REVOKED")
    value = serializers.JSONField(
        allow_null=True,
        help_text="The target's return value or response summary; for a failure, the error.",
    )
    traceback = serializers.CharField(allow_null=True)
    done_at = AwareDateTimeField(source="date_done")


class AttemptOut(serializers.Serializer[Any]):
    attempt = serializers.IntegerField()
    worker = serializers.CharField()
    queued_at = AwareDateTimeField(allow_null=True)
    started_at = AwareDateTimeField(allow_null=True)
    finished_at = AwareDateTimeField(allow_null=True)
    outcome = serializers.CharField()
    error = serializers.CharField()
    result = serializers.SerializerMethodField()

    @extend_schema_field(AttemptResultOut(allow_null=True))
    def get_result(self, attempt: Any) -> dict[str, Any] | None:
        row = self.context.get("attempt_results", {}).get(attempt.attempt)
        if row is None:
            return None
        row.value = result_decoded(row)
        return dict(AttemptResultOut(row).data)


class RunOut(serializers.Serializer[Any]):
    run_id = serializers.UUIDField(source="id")
    job_id = serializers.UUIDField()
    scheduled_for = AwareDateTimeField()
    logical_time = AwareDateTimeField(
        source="scheduled_for",
        help_text="The root firing this run belongs to; every run of one DAG run shares it.",
    )
    upstream_run_ids = serializers.ListField(
        child=serializers.UUIDField(),
        help_text="The parents' runs for the same logical time that decided this run.",
    )
    trigger = serializers.CharField()
    state = serializers.CharField()
    attempt = serializers.IntegerField()
    due_at = AwareDateTimeField(allow_null=True)
    queued_at = AwareDateTimeField(allow_null=True)
    started_at = AwareDateTimeField(allow_null=True)
    finished_at = AwareDateTimeField(allow_null=True)
    # First attempt: due instant to message in the broker (publish lag), and to its start.
    lateness_sec = SecondsOutField(source="lateness", allow_null=True)
    start_lag_sec = SecondsOutField(source="start_lag", allow_null=True)
    cancel_requested = serializers.BooleanField()
    last_error = serializers.CharField()
    replayed_count = serializers.IntegerField()
    created_at = AwareDateTimeField()


# The columns RunOut reads, and RunOut's output written by hand for the runs page. DRF walks
# every field of every row through several calls; on a page of 20 runs that cost about as much
# as reading the page, and the page is the API's busiest reader (docs/history.md, "Readers").
# tests/unit/jobs/test_run_rows_out.py holds run_rows_out equal to RunOut(rows, many=True).data.
RUN_OUT_COLUMNS = (
    "id", "job_id", "scheduled_for", "upstream_run_ids", "trigger", "state", "attempt",
    "due_at", "queued_at", "started_at", "finished_at", "lateness", "start_lag",
    "cancel_requested", "last_error", "replayed_count", "created_at",
)  # fmt: skip


def _instant(value: datetime | None) -> str | None:
    return None if value is None else utc_iso(value)


def _seconds(value: timedelta | None) -> float | int | None:
    if value is None:
        return None
    total = value.total_seconds()
    return int(total) if total.is_integer() else total


def run_rows_out(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """RunOut's representation of ``rows``, each a mapping of RUN_OUT_COLUMNS."""
    return [
        {
            "run_id": str(row["id"]),
            "job_id": str(row["job_id"]),
            "scheduled_for": utc_iso(row["scheduled_for"]),
            "logical_time": utc_iso(row["scheduled_for"]),
            "upstream_run_ids": [str(run_id) for run_id in row["upstream_run_ids"]],
            "trigger": str(row["trigger"]),
            "state": str(row["state"]),
            "attempt": int(row["attempt"]),
            "due_at": _instant(row["due_at"]),
            "queued_at": _instant(row["queued_at"]),
            "started_at": _instant(row["started_at"]),
            "finished_at": _instant(row["finished_at"]),
            "lateness_sec": _seconds(row["lateness"]),
            "start_lag_sec": _seconds(row["start_lag"]),
            "cancel_requested": bool(row["cancel_requested"]),
            "last_error": str(row["last_error"]),
            "replayed_count": int(row["replayed_count"]),
            "created_at": utc_iso(row["created_at"]),
        }
        for row in rows
    ]


class RunDetailOut(RunOut):
    worker = serializers.CharField()
    result = serializers.JSONField(allow_null=True)
    attempts = AttemptOut(many=True)

    def to_representation(self, instance: Any) -> Any:
        # One lookup for every attempt's stored result; the nested attempts read the context.
        context = cast("dict[str, Any]", self.context)
        context["attempt_results"] = results_of_run(instance)
        return super().to_representation(instance)


class JobDetailOut(JobOut):
    """The definition plus the latest run, and counts and figures over the recent runs."""

    last_run = serializers.SerializerMethodField()
    run_counts = serializers.SerializerMethodField()
    figures = serializers.SerializerMethodField()

    @extend_schema_field(RunOut(allow_null=True))
    def get_last_run(self, job: Any) -> dict[str, Any] | None:
        last = self.context.get("last_run")
        return None if last is None else dict(RunOut(last).data)

    @extend_schema_field(serializers.DictField(child=serializers.IntegerField()))
    def get_run_counts(self, job: Any) -> dict[str, int]:
        return dict(self.context.get("run_counts", {}))

    @extend_schema_field(JobFiguresOut(allow_null=True))
    def get_figures(self, job: Any) -> dict[str, Any] | None:
        figures = self.context.get("figures")
        if figures is None:
            return None
        return figures_body(figures, job=job, last_run=self.context.get("last_run"))


class DeadLetterOut(serializers.Serializer[Any]):
    dead_letter_id = serializers.IntegerField(source="id")
    run_id = serializers.UUIDField()
    job_id = serializers.UUIDField()
    attempts = serializers.IntegerField()
    last_error = serializers.CharField()
    moved_at = AwareDateTimeField()
    replayed_at = AwareDateTimeField(allow_null=True)
    replay_count = serializers.IntegerField()


class ReplayOut(serializers.Serializer[Any]):
    dead_letter = DeadLetterOut()
    run = RunOut()


class JobListQuery(StrictQuery):
    status = serializers.ChoiceField(choices=JobStatus.values, required=False)
    name = serializers.CharField(required=False, max_length=200)
    cursor = serializers.CharField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200)


class RunListQuery(StrictQuery):
    state = serializers.ChoiceField(choices=RunState.values, required=False)
    since = AwareDateTimeField(required=False, help_text="scheduled_for >= since")
    until = AwareDateTimeField(required=False, help_text="scheduled_for < until")
    cursor = serializers.CharField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200)


class DeadLetterListQuery(StrictQuery):
    job_id = serializers.UUIDField(required=False)
    replayed = serializers.BooleanField(required=False, allow_null=True, default=None)
    cursor = serializers.CharField(required=False)
    limit = serializers.IntegerField(required=False, min_value=1, max_value=200)


class PreviewQuery(StrictQuery):
    schedule = serializers.CharField(trim_whitespace=False, max_length=1000)
    timezone = serializers.CharField(required=False, default="UTC", max_length=200)
    count = serializers.IntegerField(required=False, default=5, min_value=1, max_value=PREVIEW_MAX)
    after = AwareDateTimeField(required=False, help_text="default: now")


class PreviewOut(serializers.Serializer[Any]):
    schedule = serializers.CharField()
    timezone = serializers.CharField()
    fires = serializers.ListField(child=AwareDateTimeField())
    fires_local = serializers.ListField(
        child=serializers.CharField(), help_text="The same instants in the schedule's timezone."
    )


class ErrorDetailOut(serializers.Serializer[Any]):
    code = serializers.CharField()
    message = serializers.CharField()
    # DRF pops declared fields from the class, so this does not shadow Serializer.fields.
    fields = serializers.DictField(  # type: ignore[assignment]
        child=serializers.ListField(child=serializers.CharField()), required=False
    )
    current_version = serializers.IntegerField(required=False)
    dependents = serializers.ListField(
        child=serializers.DictField(child=serializers.CharField()),
        required=False,
        help_text="has_dependents: the live dependent jobs (job_id, name) that kept the cancel.",
    )
    archived = serializers.DictField(
        required=False,
        help_text="archived (410): the archived days of the range or run asked for (ArchivedOut).",
    )


# "from" is a Python keyword, so the class is built from a dict of its fields.
ArchivedOut = type(
    "ArchivedOut",
    (serializers.Serializer,),
    {
        "from": serializers.DateTimeField(help_text="start of the first archived UTC day"),
        "until": serializers.DateTimeField(help_text="end of the last archived UTC day"),
        "days": serializers.IntegerField(help_text="archived days in the range"),
        "message": serializers.CharField(),
    },
)


class ErrorOut(serializers.Serializer[Any]):
    error = ErrorDetailOut()
    request_id = serializers.CharField()


def page_of(
    item: type[serializers.Serializer[Any]], name: str
) -> type[serializers.Serializer[Any]]:
    """A named page envelope: {"results": [...], "next": url|null, "previous": url|null}."""
    attrs: dict[str, Any] = {
        "results": item(many=True),
        "next": serializers.URLField(allow_null=True),
        "previous": serializers.URLField(allow_null=True),
    }
    return type(name, (serializers.Serializer,), attrs)


JobPage = page_of(JobOut, "JobPage")
RunPage = type(
    "RunPage",
    (page_of(RunOut, "RunPageBase"),),
    {
        "archived": ArchivedOut(
            allow_null=True,
            help_text=(
                "On the page that ends the hot history (no next page): the archived days the "
                "query's range reaches into, or null. Those runs are in the archive only."
            ),
        )
    },
)
DeadLetterPage = page_of(DeadLetterOut, "DeadLetterPage")
