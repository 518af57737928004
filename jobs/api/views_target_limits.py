"""/v1/target-limits: a tenant's per-target rate limits (docs/api.md, "Per-target rate
limits"; docs/limits.md)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from jobs.api.base import ApiView, errors
from jobs.api.serializers_target_limits import (
    TargetLimitIn,
    TargetLimitList,
    TargetLimitOut,
    TargetLimitPatchIn,
)
from jobs.models_target_limits import TargetLimit
from jobs.services.target_limit_config import (
    target_limit_create,
    target_limit_delete,
    target_limit_update,
    target_limits_of,
)


class TargetLimitCollectionView(ApiView):
    @extend_schema(operation_id="target_limits_list", responses={200: TargetLimitList, **errors()})
    def get(self, request: Request) -> Response:
        return Response({"results": TargetLimitOut(target_limits_of(self.tenant), many=True).data})

    @extend_schema(
        operation_id="target_limits_create",
        request=TargetLimitIn,
        examples=[
            OpenApiExample(
                "Five requests a second to one host, bursts of ten",
                request_only=True,
                value={"target": "api.example.com", "rate_per_s": 5, "burst": 10},
            )
        ],
        responses={201: TargetLimitOut, **errors(400)},
    )
    def post(self, request: Request) -> Response:
        body = TargetLimitIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        limit = target_limit_create(
            tenant=self.tenant,
            target=data["target"],
            rate_per_s=data["rate_per_s"],
            burst=data.get("burst"),
            now=self.now,
        )
        location = f"/v1/target-limits/{limit.id}"
        return Response(TargetLimitOut(limit).data, status=201, headers={"Location": location})


class TargetLimitItemView(ApiView):
    def _get(self, target_limit_id: int) -> TargetLimit:
        # Another tenant's limit is as unknown as a missing one (404).
        return TargetLimit.objects.get(tenant=self.tenant, id=target_limit_id)

    @extend_schema(
        operation_id="target_limits_retrieve", responses={200: TargetLimitOut, **errors(404)}
    )
    def get(self, request: Request, target_limit_id: int) -> Response:
        return Response(TargetLimitOut(self._get(target_limit_id)).data)

    @extend_schema(
        operation_id="target_limits_update",
        request=TargetLimitPatchIn,
        responses={200: TargetLimitOut, **errors(400, 404)},
    )
    def patch(self, request: Request, target_limit_id: int) -> Response:
        limit = self._get(target_limit_id)
        body = TargetLimitPatchIn(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        limit = target_limit_update(limit=limit, changes=body.validated_data, now=self.now)
        return Response(TargetLimitOut(limit).data)

    @extend_schema(operation_id="target_limits_delete", responses={204: None, **errors(404)})
    def delete(self, request: Request, target_limit_id: int) -> Response:
        target_limit_delete(limit=self._get(target_limit_id))
        return Response(status=204)
