"""Admin for per-target rate limits: saved through the services that the API uses, with their
checks (target name, rate, burst, one row per target) shown as form errors."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import ForeignKey
from django.http import HttpRequest

from jobs.admin import TENANT_FILTER, TenantScopedAdmin, clock, tenant_of
from jobs.errors import InvalidInput
from jobs.models import Tenant
from jobs.models_target_limits import TargetLimit
from jobs.services.target_limit_config import (
    target_limit_create,
    target_limit_update,
    validate_burst,
    validate_rate,
    validate_target,
)


class TargetLimitAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = TargetLimit
        fields = ("tenant", "target", "rate_per_s", "burst")
        help_texts = {  # noqa: RUF012 - Django reads this as a class attribute
            "target": "An HTTP host (api.example.com), a group name jobs opt into, or * for "
            "every HTTP host of the tenant without a row of its own.",
            "rate_per_s": "Requests per second the tenant's runs may send to the target.",
            "burst": "Most requests a quiet target may get at once.",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        checks = (
            ("target", lambda value: validate_target("target", value, wildcard=True)),
            ("rate_per_s", lambda value: validate_rate("rate_per_s", value)),
            ("burst", lambda value: validate_burst("burst", value)),
        )
        for name, check in checks:
            if data.get(name) is not None:
                try:
                    data[name] = check(data[name])
                except InvalidInput as exc:
                    self.add_error(name, exc.message)
        return data


@admin.register(TargetLimit)
class TargetLimitAdmin(TenantScopedAdmin):
    form = TargetLimitAdminForm
    list_display = ("target", "tenant", "rate_per_s", "burst", "updated_at")
    list_filter = (TENANT_FILTER,)
    search_fields = ("target",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # The target is what the bucket is named by: a new target is a new row.
        return ("tenant", "target") if obj is not None else ()

    def formfield_for_foreignkey(
        self, db_field: ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name == "tenant" and not request.user.is_superuser:
            tenant = tenant_of(request)
            own = Tenant.objects.filter(pk=tenant.pk) if tenant else Tenant.objects.none()
            kwargs["queryset"] = own
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: TargetLimit, form: Any, change: bool) -> None:
        data = form.cleaned_data
        if change:
            current = TargetLimit.objects.get(pk=obj.pk)
            changes = {name: data[name] for name in ("rate_per_s", "burst")}
            target_limit_update(limit=current, changes=changes, now=clock.now())
            return
        limit = target_limit_create(
            tenant=data["tenant"],
            target=data["target"],
            rate_per_s=data["rate_per_s"],
            burst=data["burst"],
            now=clock.now(),
        )
        obj.pk, obj.created_at, obj.updated_at = limit.pk, limit.created_at, limit.updated_at
        obj._state.adding = False
