"""Notification webhooks: create, change, delete, and the signing secret each one has.

The secret signs every delivery (HMAC-SHA256, header ``X-Scheduler-Signature``). It is neither
stored nor stored hashed: a hash cannot sign, and a stored secret would put every receiver's
key in each database dump. It is derived from ``SCHEDULER_WEBHOOK_SIGNING_KEY`` (an
environment setting, never in the database), the webhook's id and its ``secret_version``; the
API and the admin show it at creation and after a rotation, and rotating raises the version.
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F

from jobs import validation
from jobs.errors import InvalidInput
from jobs.http_policy import check_url_allowed
from jobs.models import Tenant
from jobs.models_notifications import NotificationEvent, NotificationWebhook

SIGNATURE_HEADER = "X-Scheduler-Signature"


class WebhookNameTaken(InvalidInput):
    def __init__(self, name: str) -> None:
        super().__init__("name", f"a webhook named {name!r} already exists for this tenant")


def _signing_key() -> bytes:
    key = settings.SCHEDULER["WEBHOOK_SIGNING_KEY"]
    assert isinstance(key, str)
    return key.encode()


def webhook_secret(webhook_id: uuid.UUID, secret_version: int) -> str:
    digest = hmac.new(_signing_key(), f"{webhook_id}:{secret_version}".encode(), hashlib.sha256)
    return "whsec_" + digest.hexdigest()


def webhook_signature(secret: str, timestamp: int, body: bytes) -> str:
    """The header value: ``t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>``; the
    timestamp is signed too, so a receiver can refuse replays of old deliveries."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def validate_webhook_url(url: Any) -> str:
    """The URL rules of HTTP targets (shape, then the SSRF policy), reported on ``url``."""
    try:
        validation.validate_url_shape(url)
        check_url_allowed(url)
    except InvalidInput as exc:
        raise InvalidInput("url", exc.message) from None
    assert isinstance(url, str)
    return url


def validate_events(events: Any) -> list[str]:
    if not isinstance(events, list) or not events:
        raise InvalidInput("events", f"must be a non-empty list of {NotificationEvent.values}")
    unknown = [e for e in events if e not in NotificationEvent.values]
    if unknown:
        raise InvalidInput("events", f"unknown events {unknown}; known: {NotificationEvent.values}")
    return sorted(set(events))


def webhook_create(
    *,
    tenant: Tenant,
    name: str,
    url: str,
    events: Sequence[str],
    enabled: bool = True,
    now: datetime,
) -> tuple[NotificationWebhook, str]:
    """The new webhook and its signing secret (shown to the caller once)."""
    webhook = NotificationWebhook(
        tenant=tenant,
        name=validation.validate_name(name),
        url=validate_webhook_url(url),
        events=validate_events(list(events)),
        enabled=bool(enabled),
        created_at=now,
        updated_at=now,
    )
    try:
        with transaction.atomic():
            webhook.save(force_insert=True)
    except IntegrityError:
        raise WebhookNameTaken(webhook.name) from None
    return webhook, webhook_secret(webhook.id, webhook.secret_version)


_CHANGEABLE = frozenset({"name", "url", "events", "enabled"})


def webhook_update(
    *, webhook: NotificationWebhook, changes: dict[str, Any], rotate_secret: bool, now: datetime
) -> tuple[NotificationWebhook, str | None]:
    """Apply ``changes`` (all validated before anything is written); with ``rotate_secret``
    the old secret stops verifying and the new one is returned."""
    unknown = set(changes) - _CHANGEABLE
    if unknown:
        raise InvalidInput(sorted(unknown)[0], "cannot be changed")
    if "name" in changes:
        webhook.name = validation.validate_name(changes["name"])
    if "url" in changes:
        webhook.url = validate_webhook_url(changes["url"])
    if "events" in changes:
        webhook.events = validate_events(changes["events"])
    if "enabled" in changes:
        webhook.enabled = bool(changes["enabled"])
    webhook.updated_at = now
    fields = ["name", "url", "events", "enabled", "updated_at"]
    try:
        with transaction.atomic():
            webhook.save(update_fields=fields)
            if rotate_secret:
                NotificationWebhook.objects.filter(id=webhook.id).update(
                    secret_version=F("secret_version") + 1
                )
    except IntegrityError:
        raise WebhookNameTaken(webhook.name) from None
    webhook.refresh_from_db()
    secret = webhook_secret(webhook.id, webhook.secret_version) if rotate_secret else None
    return webhook, secret


def webhook_delete(*, webhook: NotificationWebhook) -> None:
    """Its pending deliveries go with it (cascade): nobody is left to receive them."""
    webhook.delete()


def webhooks_of(tenant: Tenant) -> Iterable[NotificationWebhook]:
    return NotificationWebhook.objects.filter(tenant=tenant).order_by("name")
