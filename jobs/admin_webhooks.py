"""Admin for notification webhooks and their deliveries: saved through the webhook services,
with their validation (URL shape, SSRF policy, events) shown as form errors."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import ForeignKey, QuerySet
from django.http import HttpRequest

from jobs.admin import TENANT_FILTER, ReadOnlyAdmin, TenantScopedAdmin, clock, tenant_of
from jobs.errors import InvalidInput
from jobs.models import Tenant
from jobs.models_notifications import NotificationDelivery, NotificationEvent, NotificationWebhook
from jobs.services.webhooks import (
    validate_events,
    validate_webhook_url,
    webhook_create,
    webhook_secret,
    webhook_update,
)
from jobs.validation import validate_name


class WebhookAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    events = forms.MultipleChoiceField(
        choices=NotificationEvent.choices, widget=forms.CheckboxSelectMultiple
    )

    class Meta:
        model = NotificationWebhook
        fields = ("tenant", "name", "url", "events", "enabled")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        # The services' checks, as the API applies them; shown on the field they concern.
        checks = (
            ("name", validate_name),
            ("url", validate_webhook_url),
            ("events", lambda value: validate_events(list(value))),
        )
        for name, check in checks:
            if name in data:
                try:
                    data[name] = check(data[name])
                except InvalidInput as exc:
                    self.add_error(name if name in self.fields else None, exc.message)
        return data


@admin.register(NotificationWebhook)
class NotificationWebhookAdmin(TenantScopedAdmin):
    form = WebhookAdminForm
    list_display = ("name", "tenant", "url", "events", "enabled", "updated_at")
    list_filter = (TENANT_FILTER, "enabled")
    search_fields = ("name", "url")
    actions = ("rotate_secret",)

    def formfield_for_foreignkey(
        self, db_field: ForeignKey[Any, Any], request: HttpRequest, **kwargs: Any
    ) -> Any:
        if db_field.name == "tenant" and not request.user.is_superuser:
            # Tenant-scoped staff create webhooks for their own tenant only.
            tenant = tenant_of(request)
            own = Tenant.objects.filter(pk=tenant.pk) if tenant else Tenant.objects.none()
            kwargs["queryset"] = own
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(
        self, request: HttpRequest, obj: NotificationWebhook, form: Any, change: bool
    ) -> None:
        data = form.cleaned_data
        if not change:
            webhook, secret = webhook_create(
                tenant=data["tenant"],
                name=data["name"],
                url=data["url"],
                events=data["events"],
                enabled=data["enabled"],
                now=clock.now(),
            )
            obj.pk, obj.created_at, obj.updated_at = (
                webhook.pk,
                webhook.created_at,
                webhook.updated_at,
            )
            obj._state.adding = False
            self._show_secret(request, secret)
            return
        current = NotificationWebhook.objects.get(pk=obj.pk)
        changes = {name: data[name] for name in ("name", "url", "events", "enabled")}
        webhook_update(webhook=current, changes=changes, rotate_secret=False, now=clock.now())

    def _show_secret(self, request: HttpRequest, secret: str) -> None:
        messages.success(
            request,
            f"Signing secret (shown once; it verifies X-Scheduler-Signature): {secret}",
        )

    @admin.action(description="Rotate the signing secret", permissions=["operate"])
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[NotificationWebhook]) -> None:
        for webhook in queryset:
            webhook_update(webhook=webhook, changes={}, rotate_secret=True, now=clock.now())
            webhook.refresh_from_db()
            self.message_user(
                request,
                f"{webhook.name}: new secret {webhook_secret(webhook.id, webhook.secret_version)}",
                messages.SUCCESS,
            )


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(ReadOnlyAdmin):
    list_display = (
        "event", "webhook", "tenant", "state", "attempts", "last_status", "created_at",
        "delivered_at",
    )  # fmt: skip
    list_filter = (TENANT_FILTER, "state", "event")
    list_select_related = ("webhook", "tenant")
    ordering = ("-created_at",)
