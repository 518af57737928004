"""Bearer API-key authentication: each request acts for exactly one tenant."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from beat_engine.clock import Clock, SystemClock
from jobs.models import ApiKey, Tenant
from jobs.services.tenants import api_key_authenticate

# The authentication edge reads the clock once per request, for last_used_at.
clock: Clock = SystemClock()


@dataclass(frozen=True)
class TenantPrincipal:
    """request.user for API calls: the tenant the key belongs to, and the key itself."""

    tenant: Tenant
    api_key: ApiKey
    is_authenticated: bool = True


class TenantKeyAuthentication(BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[TenantPrincipal, ApiKey] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token or " " in token:
            raise exceptions.AuthenticationFailed("expected 'Authorization: Bearer sk_...'")
        key = api_key_authenticate(plaintext=token, now=clock.now())
        if key is None:
            # One message for unknown, revoked and malformed keys: nothing to probe.
            raise exceptions.AuthenticationFailed("invalid or revoked API key")
        return TenantPrincipal(tenant=key.tenant, api_key=key), key

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="scheduler"'


class TenantKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    """Tells drf-spectacular how the key is sent, so the schema documents the security scheme."""

    target_class = "jobs.api.auth.TenantKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A tenant API key: Authorization: Bearer sk_...",
        }


def request_tenant(request: Request) -> Tenant:
    principal = request.user
    if not isinstance(principal, TenantPrincipal):
        raise exceptions.NotAuthenticated()
    return principal.tenant
