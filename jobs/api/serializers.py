"""Job request and response shapes; types and shape only, the services judge the values."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.api.fields import (
    MAX_SECONDS,
    AwareDateTimeField,
    PayloadField,
    SecondsOutField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    StrictUUIDField,
    seconds,
)
from jobs.api.serializers_target_limits import RateLimitIn, RateLimitOut, rate_limit_changes
from jobs.models import CatchUpPolicyChoice, ConcurrencyPolicy, JobStatus, TargetKind, TriggerRule
from jobs.validation import PRIORITY_HELP

# A bound on the list's shape only; the dependency service refuses more than its parent limit
# with its own message.
DEPENDS_ON_MAX_ITEMS = 1000


def _seconds_field(**kwargs: Any) -> StrictIntegerField:
    return StrictIntegerField(required=False, max_value=MAX_SECONDS, **kwargs)


class TargetIn(StrictSerializer):
    kind = serializers.ChoiceField(choices=TargetKind.values)
    name = StrictCharField(required=False, allow_blank=True, max_length=255)
    url = StrictCharField(required=False, allow_blank=True, max_length=2048)
    headers = serializers.DictField(
        child=StrictCharField(allow_blank=True, trim_whitespace=False), required=False
    )


class RetriesIn(StrictSerializer):
    max_attempts = StrictIntegerField(required=False)
    base_delay_sec = _seconds_field()
    max_delay_sec = _seconds_field()
    jitter = StrictBooleanField(required=False)
    retry_on_client_error = StrictBooleanField(required=False)


class CatchUpIn(StrictSerializer):
    policy = serializers.ChoiceField(choices=CatchUpPolicyChoice.values, required=False)
    limit = StrictIntegerField(required=False)
    starting_deadline_sec = _seconds_field(allow_null=True)


class JobDefinitionIn(StrictSerializer):
    """Give exactly one of schedule (cron), interval_sec, run_at or depends_on."""

    name = StrictCharField(allow_blank=True, trim_whitespace=False, max_length=1000)
    description = StrictCharField(required=False, allow_blank=True, max_length=10_000)
    schedule = StrictCharField(
        required=False, allow_null=True, trim_whitespace=False, max_length=1000
    )
    interval_sec = _seconds_field(allow_null=True)
    run_at = AwareDateTimeField(required=False, allow_null=True)
    timezone = StrictCharField(required=False, max_length=200)
    target = TargetIn()
    payload = PayloadField(required=False)
    retries = RetriesIn(required=False)
    timeout_sec = _seconds_field()
    concurrency_policy = serializers.ChoiceField(choices=ConcurrencyPolicy.values, required=False)
    catchup = CatchUpIn(required=False)
    jitter_sec = _seconds_field()
    critical = StrictBooleanField(required=False)
    priority = StrictIntegerField(required=False, help_text=PRIORITY_HELP)
    queue = StrictCharField(required=False, max_length=200)
    depends_on = serializers.ListField(
        child=StrictUUIDField(),
        required=False,
        allow_null=True,
        max_length=DEPENDS_ON_MAX_ITEMS,
        help_text=(
            "Ids of parent jobs of the same tenant: the job runs once per logical time of its "
            "roots, after its parents (docs/dags.md). Replaces the schedule fields; on PATCH "
            "it replaces the parents, and [] or null removes them."
        ),
    )
    trigger_rule = serializers.ChoiceField(
        choices=TriggerRule.values,
        required=False,
        help_text="all_success (default): after every parent's run succeeded; all_done: after "
        "every parent's run ended, whatever its outcome.",
    )
    max_running_runs = StrictIntegerField(
        required=False,
        allow_null=True,
        help_text="Runs of this job running at once, across all workers (1-100000); null "
        "(default): no limit of its own, only its tenant's. A run over it waits, no attempt "
        "spent, and starts when a slot frees, oldest firing first (docs/limits.md).",
    )
    rate_limit = RateLimitIn(
        required=False,
        help_text="Per-target rate limit (docs/limits.md): the group whose bucket the job's "
        "runs share, or a rate of the job's own. A run over it waits, no attempt spent.",
    )


class JobCreateIn(JobDefinitionIn):
    idempotency_key = StrictCharField(required=False, max_length=255)


class JobBulkIn(StrictSerializer):
    # many=True builds a ListSerializer, which takes max_length; the stubs do not know that.
    jobs = JobDefinitionIn(many=True, max_length=1000)  # type: ignore[call-arg]


class JobPatchIn(JobDefinitionIn):
    """Any subset of the definition, plus status and the version the change is based on."""

    status = serializers.ChoiceField(
        choices=[JobStatus.ACTIVE.value, JobStatus.PAUSED.value], required=False
    )
    version = StrictIntegerField(required=False, min_value=1)


_SIMPLE = ("name", "description", "timezone", "payload", "concurrency_policy", "critical")
_SIMPLE_MORE = ("priority", "queue", "trigger_rule")
_LIMITS = ("max_running_runs",)
_RETRIES = {
    "max_attempts": "max_attempts",
    "jitter": "retry_jitter",
    "retry_on_client_error": "retry_on_client_error",
}


def _target_fields(target: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "kind" in target:
        # A new kind starts from a clean target, so no stale url or name rides along.
        out = {
            "target_kind": target["kind"],
            "target_name": "",
            "target_url": "",
            "target_headers": {},
        }
    for api, field in (
        ("name", "target_name"),
        ("url", "target_url"),
        ("headers", "target_headers"),
    ):
        if api in target:
            out[field] = target[api]
    return out


def _dependency_fields(data: dict[str, Any]) -> dict[str, Any]:
    if "depends_on" not in data:
        return {}
    parents = data["depends_on"]
    out: dict[str, Any] = {"depends_on": list(parents) if parents else None}
    if parents and not {"schedule", "interval_sec", "run_at"} & data.keys():
        # Naming parents replaces the schedule, as naming one schedule kind replaces the
        # others; sending both is the service's error.
        out.update(cron=None, interval=None, run_at=None)
    return out


def job_changes(data: dict[str, Any]) -> dict[str, Any]:
    """Validated request fields -> JobInput field names (only those the client sent)."""
    out: dict[str, Any] = {k: data[k] for k in (*_SIMPLE, *_SIMPLE_MORE, *_LIMITS) if k in data}
    if {"schedule", "interval_sec", "run_at"} & data.keys():
        # Naming one schedule kind replaces the other two and the parents; naming two, or a
        # schedule and parents, is the service's error.
        out["cron"] = data.get("schedule")
        out["interval"] = seconds(data.get("interval_sec"))
        out["run_at"] = data.get("run_at")
        out["depends_on"] = None
    out.update(_dependency_fields(data))
    out.update(_target_fields(data.get("target", {})))
    out.update(rate_limit_changes(data))
    retries = data.get("retries", {})
    out.update({field: retries[api] for api, field in _RETRIES.items() if api in retries})
    if "base_delay_sec" in retries:
        out["retry_base_delay"] = seconds(retries["base_delay_sec"])
    if "max_delay_sec" in retries:
        out["retry_max_delay"] = seconds(retries["max_delay_sec"])
    catchup = data.get("catchup", {})
    if "policy" in catchup:
        out["catchup_policy"] = catchup["policy"]
    if "limit" in catchup:
        out["catchup_limit"] = catchup["limit"]
    if "starting_deadline_sec" in catchup:
        out["starting_deadline"] = seconds(catchup["starting_deadline_sec"])
    if "timeout_sec" in data:
        out["timeout"] = seconds(data["timeout_sec"])
    if "jitter_sec" in data:
        out["jitter_window"] = seconds(data["jitter_sec"])
    return out


class TargetOut(serializers.Serializer[Any]):
    kind = serializers.CharField(source="target_kind")
    name = serializers.CharField(source="target_name")
    url = serializers.CharField(source="target_url")
    header_names = serializers.SerializerMethodField(
        help_text="Names of the target's headers; values are never shown, they may be secrets."
    )

    def get_header_names(self, job: Any) -> list[str]:
        return sorted(job.target_headers)


def parent_ids(job: Any) -> list[str]:
    """The job's parent ids, sorted; lists prefetch ``parent_edges`` so a page costs one query."""
    return sorted(str(edge.parent_id) for edge in job.parent_edges.all())


class RetriesOut(serializers.Serializer[Any]):
    max_attempts = serializers.IntegerField()
    base_delay_sec = SecondsOutField(source="retry_base_delay")
    max_delay_sec = SecondsOutField(source="retry_max_delay")
    jitter = serializers.BooleanField(source="retry_jitter")
    retry_on_client_error = serializers.BooleanField()


class CatchUpOut(serializers.Serializer[Any]):
    policy = serializers.CharField(source="catchup_policy")
    limit = serializers.IntegerField(source="catchup_limit")
    starting_deadline_sec = SecondsOutField(source="starting_deadline", allow_null=True)


class JobOut(serializers.Serializer[Any]):
    job_id = serializers.UUIDField(source="id")
    name = serializers.CharField()
    description = serializers.CharField()
    kind = serializers.CharField()
    status = serializers.CharField()
    status_reason = serializers.CharField()
    schedule = serializers.CharField(source="cron_expression", allow_null=True)
    interval_sec = serializers.IntegerField(source="interval_seconds", allow_null=True)
    run_at = AwareDateTimeField(allow_null=True)
    timezone = serializers.CharField()
    target = TargetOut(source="*")
    payload = serializers.JSONField()
    retries = RetriesOut(source="*")
    timeout_sec = SecondsOutField(source="timeout")
    concurrency_policy = serializers.CharField()
    catchup = CatchUpOut(source="*")
    jitter_sec = SecondsOutField(source="jitter_window")
    critical = serializers.BooleanField()
    priority = serializers.IntegerField(help_text=PRIORITY_HELP)
    queue = serializers.CharField()
    depends_on = serializers.SerializerMethodField(
        help_text="Ids of the job's parents (kind dependent); empty for a scheduled job."
    )
    trigger_rule = serializers.CharField()
    max_running_runs = serializers.IntegerField(
        allow_null=True, help_text="Runs of this job running at once; null: no limit of its own."
    )
    rate_limit = RateLimitOut(source="*")
    next_fire_at = AwareDateTimeField(allow_null=True)
    last_fire_at = AwareDateTimeField(allow_null=True)
    version = serializers.IntegerField()
    idempotency_key = serializers.CharField()
    created_at = AwareDateTimeField()
    updated_at = AwareDateTimeField()

    @extend_schema_field(serializers.ListField(child=serializers.UUIDField()))
    def get_depends_on(self, job: Any) -> list[str]:
        return parent_ids(job)
