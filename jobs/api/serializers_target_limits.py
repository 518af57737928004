"""Request and response shapes of per-target rate limits: a job's ``rate_limit`` and the
/v1/target-limits rows (docs/api.md, "Per-target rate limits")."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from jobs.api.fields import (
    AwareDateTimeField,
    StrictCharField,
    StrictIntegerField,
    StrictSerializer,
    json_type,
)


class StrictNumberField(serializers.FloatField):
    """A JSON number: not ``"5"`` or ``true``, which DRF's FloatField accepts."""

    default_error_messages = {  # noqa: RUF012 - DRF reads this as a class attribute
        **serializers.FloatField.default_error_messages,
        "wrong_type": "must be a number, not a {kind}",
    }

    def to_internal_value(self, data: Any) -> float:
        if isinstance(data, bool) or not isinstance(data, int | float):
            self.fail("wrong_type", kind=json_type(data))
        return float(super().to_internal_value(data))


_GROUP_HELP = (
    "The target group whose bucket the job's runs share (a TargetLimit's target); empty: the "
    "HTTP host of its URL."
)
_RATE_HELP = (
    "Requests per second for this job's own bucket, in place of its tenant's limit for the "
    "target; null: the tenant's limit, if any."
)


class RateLimitIn(StrictSerializer):
    group = StrictCharField(required=False, allow_blank=True, max_length=255, help_text=_GROUP_HELP)
    rate_per_s = StrictNumberField(required=False, allow_null=True, help_text=_RATE_HELP)
    burst = StrictIntegerField(
        required=False, allow_null=True, help_text="The job's own bucket's size (default 1)."
    )


class RateLimitOut(serializers.Serializer[Any]):
    group = serializers.CharField(source="target_group", help_text=_GROUP_HELP)
    rate_per_s = serializers.FloatField(source="target_rate", allow_null=True, help_text=_RATE_HELP)
    burst = serializers.IntegerField(source="target_burst", allow_null=True)


_RATE_LIMIT_FIELDS = {"group": "target_group", "rate_per_s": "target_rate", "burst": "target_burst"}


def rate_limit_changes(data: dict[str, Any]) -> dict[str, Any]:
    """A request's ``rate_limit`` -> JobInput fields (only those the client sent)."""
    given = data.get("rate_limit", {})
    return {field: given[api] for api, field in _RATE_LIMIT_FIELDS.items() if api in given}


class TargetLimitIn(StrictSerializer):
    target = StrictCharField(
        max_length=1000,
        help_text="An HTTP host (api.example.com), a group name jobs name in rate_limit.group, "
        "or * for every HTTP host of the tenant that has no limit of its own.",
    )
    rate_per_s = StrictNumberField(help_text="Tokens added per second (more than 0).")
    burst = StrictIntegerField(
        required=False, help_text="Most tokens the bucket holds: the burst a quiet target gets."
    )


class TargetLimitPatchIn(StrictSerializer):
    rate_per_s = StrictNumberField(required=False)
    burst = StrictIntegerField(required=False)


class TargetLimitOut(serializers.Serializer[Any]):
    target_limit_id = serializers.IntegerField(source="id")
    target = serializers.CharField()
    rate_per_s = serializers.FloatField()
    burst = serializers.IntegerField()
    created_at = AwareDateTimeField()
    updated_at = AwareDateTimeField()


class TargetLimitList(serializers.Serializer[Any]):
    results = TargetLimitOut(many=True)
