"""Tenants and their API keys: keys are random, shown once, stored as hashes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from jobs.errors import InvalidInput
from jobs.models import ApiKey, Tenant

KEY_PREFIX = "sk_"
# How fresh an API key's last_used_at is kept (docs/api.md, "Authentication").
LAST_USED_RESOLUTION = timedelta(minutes=1)


def _hash(secret: str) -> str:
    # The key carries 256 random bits, so a fast hash is enough: there is nothing to brute-force.
    return hashlib.sha256(secret.encode()).hexdigest()


@transaction.atomic
def tenant_create(*, name: str, now: datetime) -> Tenant:
    name = name.strip()
    if not name or len(name) > 100:
        raise InvalidInput("name", "must be 1-100 characters")
    if Tenant.objects.filter(name=name).exists():
        raise InvalidInput("name", f"tenant {name!r} already exists")
    return Tenant.objects.create(name=name, created_at=now)


@transaction.atomic
def api_key_create(*, tenant: Tenant, name: str, now: datetime) -> tuple[ApiKey, str]:
    """Returns the row and the plaintext key, which is never stored and cannot be shown again."""
    prefix = secrets.token_hex(6)
    plaintext = f"{KEY_PREFIX}{prefix}_{secrets.token_urlsafe(32)}"
    key = ApiKey.objects.create(
        tenant=tenant, name=name, prefix=prefix, key_hash=_hash(plaintext), created_at=now
    )
    return key, plaintext


def api_key_authenticate(*, plaintext: str, now: datetime) -> ApiKey | None:
    """The active key matching ``plaintext``, compared in constant time; None otherwise."""
    if not plaintext.startswith(KEY_PREFIX):
        return None
    prefix, _, _ = plaintext[len(KEY_PREFIX) :].partition("_")
    key = (
        ApiKey.objects.select_related("tenant")
        .filter(prefix=prefix, revoked_at__isnull=True, tenant__is_active=True)
        .first()
    )
    if key is None or not hmac.compare_digest(key.key_hash, _hash(plaintext)):
        return None
    # A write per request would cost every read a commit: last_used_at is kept to the minute,
    # and the filter makes concurrent requests' updates one harmless compare-and-set.
    stale = now - LAST_USED_RESOLUTION
    if key.last_used_at is None or key.last_used_at <= stale:
        ApiKey.objects.filter(pk=key.pk).filter(
            Q(last_used_at__isnull=True) | Q(last_used_at__lte=stale)
        ).update(last_used_at=now)
    return key


def api_key_revoke(*, prefix: str, now: datetime) -> bool:
    return ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True).update(revoked_at=now) == 1
