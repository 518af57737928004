"""/v1/webhooks: a tenant's notification webhooks (docs/api.md, "Notification webhooks")."""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from jobs.api.base import ApiView, errors
from jobs.api.fields import (
    AwareDateTimeField,
    StrictBooleanField,
    StrictCharField,
    StrictSerializer,
)
from jobs.errors import InvalidInput
from jobs.models_notifications import NotificationDelivery, NotificationEvent, NotificationWebhook
from jobs.services.webhooks import (
    webhook_create,
    webhook_delete,
    webhook_update,
    webhooks_of,
)

# A tenant's webhooks are few; the list is not paginated, so their number is bounded.
MAX_WEBHOOKS_PER_TENANT = 20
RECENT_DELIVERIES = 10


class WebhookIn(StrictSerializer):
    name = StrictCharField(max_length=100)
    url = StrictCharField(max_length=2048)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=NotificationEvent.values), min_length=1, max_length=8
    )
    enabled = StrictBooleanField(required=False, default=True)


class WebhookPatchIn(StrictSerializer):
    name = StrictCharField(required=False, max_length=100)
    url = StrictCharField(required=False, max_length=2048)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=NotificationEvent.values),
        required=False,
        min_length=1,
        max_length=8,
    )
    enabled = StrictBooleanField(required=False)
    rotate_secret = StrictBooleanField(
        required=False, help_text="true: a new secret replaces the old one, returned once."
    )


class DeliveryOut(serializers.Serializer[Any]):
    delivery_id = serializers.UUIDField(source="id")
    event = serializers.CharField()
    state = serializers.CharField()
    attempts = serializers.IntegerField()
    last_status = serializers.IntegerField(allow_null=True)
    last_error = serializers.CharField()
    created_at = AwareDateTimeField()
    delivered_at = AwareDateTimeField(allow_null=True)
    next_attempt_at = AwareDateTimeField()


class WebhookOut(serializers.Serializer[Any]):
    webhook_id = serializers.UUIDField(source="id")
    name = serializers.CharField()
    url = serializers.CharField()
    events = serializers.ListField(child=serializers.CharField())
    enabled = serializers.BooleanField()
    created_at = AwareDateTimeField()
    updated_at = AwareDateTimeField()


class WebhookDetailOut(WebhookOut):
    recent_deliveries = serializers.SerializerMethodField()

    def get_recent_deliveries(self, webhook: NotificationWebhook) -> list[dict[str, Any]]:
        recent = NotificationDelivery.objects.filter(webhook=webhook).order_by("-created_at")
        return list(DeliveryOut(recent[:RECENT_DELIVERIES], many=True).data)


class WebhookSecretOut(WebhookOut):
    secret = serializers.CharField(
        help_text="The HMAC-SHA256 key of X-Scheduler-Signature; shown only here."
    )


class WebhookList(serializers.Serializer[Any]):
    results = WebhookOut(many=True)


def _out(webhook: NotificationWebhook, secret: str | None) -> dict[str, Any]:
    data: dict[str, Any] = dict(WebhookOut(webhook).data)
    if secret is not None:
        data["secret"] = secret
    return data


class WebhookCollectionView(ApiView):
    @extend_schema(operation_id="webhooks_list", responses={200: WebhookList, **errors()})
    def get(self, request: Request) -> Response:
        return Response({"results": WebhookOut(webhooks_of(self.tenant), many=True).data})

    @extend_schema(
        operation_id="webhooks_create",
        request=WebhookIn,
        examples=[
            OpenApiExample(
                "Dead letters and lateness to a chat bridge",
                request_only=True,
                value={
                    "name": "on-call",
                    "url": "https://hooks.example.com/scheduler",
                    "events": ["dead_letter", "sustained_lateness"],
                },
            )
        ],
        responses={201: WebhookSecretOut, **errors(400)},
    )
    def post(self, request: Request) -> Response:
        body = WebhookIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        if (
            NotificationWebhook.objects.filter(tenant=self.tenant).count()
            >= MAX_WEBHOOKS_PER_TENANT
        ):
            raise InvalidInput("name", f"a tenant has at most {MAX_WEBHOOKS_PER_TENANT} webhooks")
        webhook, secret = webhook_create(
            tenant=self.tenant,
            name=data["name"],
            url=data["url"],
            events=data["events"],
            enabled=data["enabled"],
            now=self.now,
        )
        location = f"/v1/webhooks/{webhook.id}"
        return Response(_out(webhook, secret), status=201, headers={"Location": location})


class WebhookItemView(ApiView):
    def _get(self, webhook_id: uuid.UUID) -> NotificationWebhook:
        # Another tenant's webhook is as unknown as a missing one (404).
        return NotificationWebhook.objects.get(tenant=self.tenant, id=webhook_id)

    @extend_schema(
        operation_id="webhooks_retrieve", responses={200: WebhookDetailOut, **errors(404)}
    )
    def get(self, request: Request, webhook_id: uuid.UUID) -> Response:
        return Response(WebhookDetailOut(self._get(webhook_id)).data)

    @extend_schema(
        operation_id="webhooks_update",
        request=WebhookPatchIn,
        responses={200: WebhookSecretOut, **errors(400, 404)},
    )
    def patch(self, request: Request, webhook_id: uuid.UUID) -> Response:
        webhook = self._get(webhook_id)
        body = WebhookPatchIn(data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        changes = dict(body.validated_data)
        rotate = bool(changes.pop("rotate_secret", False))
        webhook, secret = webhook_update(
            webhook=webhook, changes=changes, rotate_secret=rotate, now=self.now
        )
        return Response(_out(webhook, secret))

    @extend_schema(operation_id="webhooks_delete", responses={204: None, **errors(404)})
    def delete(self, request: Request, webhook_id: uuid.UUID) -> Response:
        webhook_delete(webhook=self._get(webhook_id))
        return Response(status=204)
