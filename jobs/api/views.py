"""Job endpoints: create (idempotent, bulk), list, read with ETag, patch, cancel, trigger."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, cast

from django.db.models import prefetch_related_objects
from django.urls import reverse
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework.request import Request
from rest_framework.response import Response

from jobs import selectors
from jobs.api.base import ApiView, errors
from jobs.api.pagination import KeyField, paginate
from jobs.api.serializers import JobBulkIn, JobCreateIn, JobOut, JobPatchIn, job_changes
from jobs.api.serializers_runs import JobDetailOut, JobListQuery, JobPage, RunOut
from jobs.errors import InvalidInput
from jobs.services import job_intake
from jobs.services.jobs import JobInput, job_cancel, job_trigger_now

JOB_KEYS = (KeyField("created_at", "datetime"), KeyField("id", "uuid"))
IF_MATCH = OpenApiParameter(
    "If-Match", str, OpenApiParameter.HEADER, description="The job's ETag or version"
)


def _etag(version: int, body: Any) -> str:
    # The version part carries optimistic concurrency (If-Match); the digest makes the tag
    # change when run counts change too, so If-None-Match never hides a new run.
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()
    return f'"{version}-{digest[:16]}"'


def _version_from(request: Request, body_version: int | None) -> int | None:
    header = request.META.get("HTTP_IF_MATCH", "").strip()
    header_version: int | None = None
    if header and header != "*":
        tag = header.removeprefix("W/").strip('"')
        number = tag.split("-", 1)[0]
        if not number.isdigit() or len(number) > 9:
            raise InvalidInput("If-Match", "must be the job's ETag or version number")
        header_version = int(number)
    if header_version is not None and body_version is not None and header_version != body_version:
        raise InvalidInput("version", "differs from the If-Match header")
    return body_version if body_version is not None else header_version


def _request_hash(data: dict[str, Any]) -> str:
    body = {k: v for k, v in data.items() if k != "idempotency_key"}
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _idempotency_key(request: Request, body_key: str | None) -> str:
    header = request.META.get("HTTP_IDEMPOTENCY_KEY", "")
    if header and (len(header) > 255 or not header.isprintable()):
        raise InvalidInput("Idempotency-Key", "must be 1-255 printable characters")
    if header and body_key and header != body_key:
        raise InvalidInput("idempotency_key", "differs from the Idempotency-Key header")
    return body_key or header


def _cascade_from(request: Request) -> bool:
    unknown = set(request.query_params) - {"cascade"}
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "is not a parameter of this endpoint")
    values = request.query_params.getlist("cascade")
    if not values:
        return False
    if len(values) > 1 or values[0] not in ("true", "false"):
        raise InvalidInput("cascade", "must be given once, as true or false")
    return values[0] == "true"


def _job_url(request: Request, job_id: uuid.UUID) -> str:
    return request.build_absolute_uri(reverse("v1:job-detail", args=[job_id]))


class JobCollectionView(ApiView):
    @extend_schema(
        operation_id="jobs_list",
        parameters=[JobListQuery],
        responses={200: JobPage, **errors()},
    )
    def get(self, request: Request) -> Response:
        query = JobListQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        jobs = selectors.job_list(
            tenant=self.tenant,
            status=query.validated_data.get("status"),
            name=query.validated_data.get("name"),
        )
        page = paginate(jobs, request, JOB_KEYS)
        results = JobOut(page.items, many=True).data
        return Response({"results": results, "next": page.next, "previous": page.previous})

    @extend_schema(
        operation_id="jobs_create",
        request=JobCreateIn,
        examples=[
            OpenApiExample(
                "Daily at 09:00 in Paris",
                request_only=True,
                value={
                    "name": "nightly-report",
                    "schedule": "0 9 * * *",
                    "timezone": "Europe/Paris",
                    "target": {"kind": "callable", "name": "demo.heartbeat"},
                    "payload": {"report": "sales"},
                    "retries": {"max_attempts": 5, "base_delay_sec": 10, "max_delay_sec": 600},
                    "idempotency_key": "nightly-report-v1",
                },
            ),
            OpenApiExample(
                "Every 90 seconds, HTTP",
                request_only=True,
                value={
                    "name": "poll-partner",
                    "interval_sec": 90,
                    "target": {
                        "kind": "http",
                        "url": "https://partner.example.com/hook",
                        "headers": {"Authorization": "Bearer partner-token"},
                    },
                },
            ),
        ],
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)],
        responses={
            201: OpenApiResponse(JobOut, description="Created"),
            200: OpenApiResponse(JobOut, description="Replay: the job this key created before"),
            **errors(422),
        },
    )
    def post(self, request: Request) -> Response:
        body = JobCreateIn(data=request.data)
        body.is_valid(raise_exception=True)
        key = _idempotency_key(request, body.validated_data.get("idempotency_key"))
        job, created = job_intake.job_create_idempotent(
            tenant=self.tenant,
            data=JobInput(**job_changes(body.validated_data)),
            idempotency_key=key,
            # StrictJSONParser admits only JSON objects, so the body is a dict here.
            request_hash=_request_hash(cast(dict[str, Any], request.data)),
            now=self.now,
        )
        headers = {"Location": _job_url(request, job.id)}
        if not created:
            headers["Idempotent-Replayed"] = "true"
        return Response(JobOut(job).data, status=201 if created else 200, headers=headers)


class JobBulkView(ApiView):
    @extend_schema(
        operation_id="jobs_bulk_create",
        request=JobBulkIn,
        responses={201: JobOut(many=True), **errors(409)},
    )
    def post(self, request: Request) -> Response:
        body = JobBulkIn(data=request.data)
        body.is_valid(raise_exception=True)
        items = [JobInput(**job_changes(item)) for item in body.validated_data["jobs"]]
        jobs = job_intake.job_create_many(tenant=self.tenant, items=items, now=self.now)
        # Every job's parents in one query, not one per job of the (up to 1,000) created.
        prefetch_related_objects(jobs, "parent_edges")
        return Response(JobOut(jobs, many=True).data, status=201)


class JobItemView(ApiView):
    def _detail(self, job_id: uuid.UUID) -> tuple[dict[str, Any], str]:
        job = selectors.job_get(tenant=self.tenant, job_id=job_id)
        summary = selectors.job_summary(job=job, now=self.now)
        context = {
            "last_run": summary.last_run,
            "run_counts": summary.run_counts,
            "figures": summary.figures,
        }
        body = dict(JobDetailOut(job, context=context).data)
        return body, _etag(job.version, body)

    @extend_schema(
        operation_id="jobs_retrieve",
        parameters=[OpenApiParameter("If-None-Match", str, OpenApiParameter.HEADER)],
        responses={
            200: JobDetailOut,
            304: OpenApiResponse(description="Not modified since the ETag given"),
            **errors(404),
        },
    )
    def get(self, request: Request, job_id: uuid.UUID) -> Response:
        body, etag = self._detail(job_id)
        given = request.META.get("HTTP_IF_NONE_MATCH", "")
        if given and (given.strip() == "*" or etag in [t.strip() for t in given.split(",")]):
            return Response(status=304, headers={"ETag": etag})
        return Response(body, headers={"ETag": etag})

    @extend_schema(
        operation_id="jobs_partial_update",
        request=JobPatchIn,
        examples=[
            OpenApiExample("Pause", request_only=True, value={"status": "paused"}),
            OpenApiExample(
                "Move to 06:30 UTC",
                request_only=True,
                value={"schedule": "30 6 * * *", "timezone": "UTC", "payload": {"v": 2}},
            ),
        ],
        parameters=[IF_MATCH],
        responses={200: JobOut, **errors(404, 409)},
    )
    def patch(self, request: Request, job_id: uuid.UUID) -> Response:
        job = selectors.job_get(tenant=self.tenant, job_id=job_id)
        body = JobPatchIn(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        data = dict(body.validated_data)
        expected = _version_from(request, data.pop("version", None))
        status = data.pop("status", None)
        job = job_intake.job_patch(
            job_id=job.id,
            changes=job_changes(data),
            status=status,
            expected_version=expected,
            now=self.now,
        )
        out = JobOut(job).data
        return Response(out, headers={"ETag": f'"{job.version}"'})

    @extend_schema(
        operation_id="jobs_cancel",
        parameters=[
            IF_MATCH,
            OpenApiParameter(
                "cascade",
                bool,
                OpenApiParameter.QUERY,
                description="Cancel the job's dependents, and theirs, too; without it a job "
                "with live dependents answers 409 naming them.",
            ),
        ],
        responses={200: JobOut, **errors(404, 409)},
    )
    def delete(self, request: Request, job_id: uuid.UUID) -> Response:
        job = selectors.job_get(tenant=self.tenant, job_id=job_id)
        expected = _version_from(request, None)
        cascade = _cascade_from(request)
        job = job_cancel(job_id=job.id, expected_version=expected, now=self.now, cascade=cascade)
        return Response(JobOut(job).data)


class JobTriggerView(ApiView):
    @extend_schema(
        operation_id="jobs_trigger",
        request=None,
        responses={201: RunOut, **errors(404, 409)},
    )
    def post(self, request: Request, job_id: uuid.UUID) -> Response:
        if request.data:
            raise InvalidInput("body", "trigger takes no body")
        job = selectors.job_get(tenant=self.tenant, job_id=job_id)
        run = job_trigger_now(job_id=job.id, now=self.now)
        location = request.build_absolute_uri(reverse("v1:run-detail", args=[run.id]))
        return Response(RunOut(run).data, status=201, headers={"Location": location})
