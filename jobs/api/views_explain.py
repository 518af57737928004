"""GET /v1/jobs/{id}/explain?at=…: why the job fired, fired late or did not fire then."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from beat_engine.clock import SystemClock
from beat_engine.db_clock import DatabaseClock
from jobs import selectors
from jobs.api.base import ApiView, errors
from jobs.api.fields import AwareDateTimeField, StrictQuery
from jobs.errors import InvalidInput
from jobs.explain_rules import Verdict
from jobs.services.explain import explain_firing
from jobs.validation import validate_instant

# One clock (docs/architecture.md, Invariants): "not yet due" and "due for 3 s" are judged on
# the clock the engine judged the firing on.
_clock = DatabaseClock(SystemClock())


class ExplainQuery(StrictQuery):
    at = AwareDateTimeField(help_text="The instant asked about, ISO 8601 with an offset.")

    def validate_at(self, value: datetime) -> datetime:
        try:
            return validate_instant("at", value)
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.message) from None


class ExplainOut(serializers.Serializer[Any]):
    verdict = serializers.ChoiceField(
        choices=[v.value for v in Verdict],
        help_text='One of the reasons in docs/operations.md, "Reasons".',
    )
    reason = serializers.CharField(help_text="The reason in a sentence.")
    at = AwareDateTimeField()
    is_firing = serializers.BooleanField(help_text="Whether the schedule fires at `at`.")
    previous_firing = AwareDateTimeField(allow_null=True)
    next_firing = AwareDateTimeField(allow_null=True)
    run_id = serializers.UUIDField(allow_null=True)
    evidence = serializers.DictField(help_text="The recorded facts the verdict rests on.")


class JobExplainView(ApiView):
    @extend_schema(
        operation_id="jobs_explain",
        parameters=[ExplainQuery],
        responses={200: ExplainOut, **errors(400, 404)},
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        query = ExplainQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        job = selectors.job_get(tenant=self.tenant, job_id=job_id)
        result = explain_firing(job, query.validated_data["at"], now=_clock.now())
        return Response(ExplainOut(result).data)
