"""Admin for tenants, jobs, runs, dead letters and keys; actions call the services."""

from __future__ import annotations

from functools import partial
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.db.models.fields.related import RelatedField
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from beat_engine.clock import SystemClock
from beat_engine.db_clock import read_database_clock
from jobs.admin_dag import JobDependenciesAdminMixin
from jobs.admin_forms import JobAdminForm
from jobs.admin_paginator import EstimatedCountPaginator
from jobs.admin_preview import schedule_preview_view
from jobs.errors import SchedulerError
from jobs.models import (
    ApiKey,
    ArchivedDay,
    DeadLetter,
    DedupKey,
    Job,
    JobRun,
    JobStatus,
    PartitionEpoch,
    RunAttempt,
    Tenant,
    TenantMember,
)
from jobs.schedule_preview import describe_cron, next_firings
from jobs.services import jobs as job_services
from jobs.services import running_limits
from jobs.services.dead_letters import dead_letter_replay
from jobs.services.tenants import api_key_create

clock = SystemClock()

# "View site" leads to the status pages, where operators watch what the admin configures.
admin.site.site_url = "/status/"


def tenant_of(request: HttpRequest) -> Tenant | None:
    membership = getattr(request.user, "tenant_membership", None)
    return membership.tenant if membership is not None else None


class TenantListFilter(admin.RelatedFieldListFilter):
    """The tenant filter, offering only the tenants the user may see.

    Django's RelatedFieldListFilter lists every tenant, which would show a tenant's staff the
    names of all the other customers; RelatedOnlyFieldListFilter would instead scan the listed
    table (millions of runs) for the tenants present. This asks the tenant table, scoped.
    """

    def field_choices(
        self,
        field: RelatedField[Any, Any],
        request: HttpRequest,
        model_admin: admin.ModelAdmin[Any],
    ) -> list[tuple[str, Any]]:
        if request.user.is_superuser:
            return list(super().field_choices(field, request, model_admin))
        tenant = tenant_of(request)
        visible = Q(pk=tenant.pk) if tenant is not None else Q(pk__in=[])
        ordering = self.field_admin_ordering(field, request, model_admin)
        choices = field.get_choices(
            include_blank=False, ordering=ordering, limit_choices_to=visible
        )
        return [(str(value), label) for value, label in choices]


TENANT_FILTER = ("tenant", TenantListFilter)


class TenantScopedAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Non-superuser staff see and change only their own tenant's objects.

    Actions that change state (pause, cancel, trigger, replay) declare
    ``permissions=["operate"]``: they need the model's change permission. Only the job form
    edits, and it saves through the job services (jobs/admin_forms.py); every other change
    form stays read-only, so no field is ever edited around the services.
    """

    tenant_field = "tenant"

    def has_operate_permission(self, request: HttpRequest) -> bool:
        codename = get_permission_codename("change", self.opts)
        return bool(request.user.has_perm(f"{self.opts.app_label}.{codename}"))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        tenant = tenant_of(request)
        if tenant is None:
            return queryset.none()
        return queryset.filter(**{self.tenant_field: tenant})

    def _get_obj_does_not_exist_redirect(
        self, request: HttpRequest, opts: Any, object_id: str
    ) -> Any:
        # Another tenant's object is outside this user's queryset: answer 404, as for an id
        # that does not exist, instead of Django's redirect to the index.
        raise Http404(f"no {opts.verbose_name} with id {object_id!r} for this account")


class ReadOnlyAdmin(TenantScopedAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("name", "is_active", "max_queued_runs", "max_running_runs", "created_at")
    search_fields = ("name",)
    list_filter = ("is_active",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Tenant]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        tenant = tenant_of(request)
        return queryset.filter(pk=tenant.pk) if tenant else queryset.none()

    # Another tenant is outside the queryset: 404, as for every tenant-scoped object.
    _get_obj_does_not_exist_redirect = TenantScopedAdmin._get_obj_does_not_exist_redirect

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if change and "max_running_runs" in form.changed_data:
            # Raised or removed: the runs it parked that now fit start at once
            # (docs/limits.md, "Running concurrency").
            running_limits.release_free_slots(
                running_limits.Hold.TENANT, obj.pk, obj.max_running_runs,
                now=read_database_clock(),
            )  # fmt: skip

    # A tenant's limits are the operator's to set: its own staff may read them, never change
    # them, whatever model permissions the account was given.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = ("name", "tenant", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = (TENANT_FILTER,)
    search_fields = ("name", "prefix")
    # Adding asks only for these; the key itself is generated, shown once, stored hashed.
    fields = ("tenant", "name")
    actions = ("revoke",)

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=clock.now())
        self.message_user(request, f"Revoked {count} key(s).")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Only superusers revoke keys (the revoke action asks for this permission); an
        # existing key's fields are never editable.
        return bool(request.user.is_superuser)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return (
            ("tenant", "name", "prefix", "created_at", "last_used_at", "revoked_at") if obj else ()
        )

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        # The hash is a secret's fingerprint; the admin never shows it.
        return self.get_readonly_fields(request, obj) if obj else ("tenant", "name")

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            return
        key, plaintext = api_key_create(tenant=obj.tenant, name=obj.name, now=clock.now())
        obj.pk = key.pk
        self.message_user(
            request,
            f"API key for {key.tenant.name}: {plaintext} — copy it now, it is not shown again.",
            level=messages.WARNING,
        )


@admin.register(TenantMember)
class TenantMemberAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("user", "tenant")
    list_filter = ("tenant",)

    # Memberships decide which tenant a staff account sees: only superusers may read or grant
    # them, whatever model permissions a staff account was given (hiding the module from the
    # index alone would leave its URLs open).
    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


RECENT_RUNS_SHOWN = 20


def _run_action(
    model_admin: admin.ModelAdmin,  # type: ignore[type-arg]
    request: HttpRequest,
    queryset: QuerySet[Job],
    verb: str,
    service: Any,
) -> None:
    now = clock.now()
    done, refused = 0, []
    for job in queryset:
        try:
            service(job_id=job.id, now=now)
            done += 1
        except SchedulerError as exc:
            refused.append(f"{job.name}: {exc}")
    if done:
        model_admin.message_user(request, f"{verb} {done} job(s).")
    for message in refused:
        model_admin.message_user(request, message, level=messages.WARNING)


@admin.register(Job)
class JobAdmin(JobDependenciesAdminMixin, TenantScopedAdmin):
    list_display = (
        "name",
        "tenant",
        "kind",
        "schedule",
        "timezone",
        "target",
        "status",
        "next_fire_at",
        "last_fire_at",
        "critical",
    )
    list_filter = ("status", "kind", "target_kind", "critical", TENANT_FILTER, "concurrency_policy")
    search_fields = ("name", "target_name", "target_url", "id")
    readonly_fields = (
        "id",
        "partition",
        "next_fire_at",
        "last_fire_at",
        "version",
        "created_at",
        "updated_at",
        "status",
        "status_reason",
        "source",
        "recent_runs",
        "schedule_preview",
        "header_names",
    )
    actions = ("pause", "resume", "cancel", "cancel_with_dependents", "trigger_now")
    ordering = ("name",)
    # No inlines: the form saves through the services while it is cleaned, so an inline
    # formset's error, checked after that, could not undo the save.
    form = JobAdminForm
    # The editable definition, grouped as the API groups it; the form saves it through the
    # job services. Read-only fields (state, recent runs, and any other admin display added
    # to readonly_fields) follow on the change page.
    definition_fieldsets: tuple[tuple[str | None, tuple[str, ...]], ...] = (
        (None, ("tenant", "name", "description", "expected_version")),
        ("Schedule", ("kind", "cron_expression", "interval_seconds", "run_at", "timezone")),
        ("Target", ("target_kind", "target_name", "target_url", "target_headers", "payload")),
        (
            "Retries and timeout",
            (
                "max_attempts",
                "retry_base_delay",
                "retry_max_delay",
                "retry_jitter",
                "retry_on_client_error",
                "timeout",
            ),
        ),
        (
            "Policies",
            (
                "concurrency_policy",
                "catchup_policy",
                "catchup_limit",
                "starting_deadline",
                "jitter_window",
                "critical",
                "queue",
                "priority",
                "max_running_runs",
            ),
        ),
        ("Dependencies", ("depends_on", "trigger_rule")),
        ("Rate limit", ("target_group", "target_rate", "target_burst")),
    )
    # Read-only displays shown inside a definition fieldset on the change page; any other
    # read-only field lands in "State and history".
    readonly_placement: ClassVar[dict[str, str]] = {
        "schedule_preview": "Schedule",
        "dependencies": "Dependencies",
    }
    # Shown instead of form-only fields when the page is read-only (no change permission).
    read_only_substitutes: ClassVar[dict[str, str | None]] = {
        "target_headers": "header_names",
        "expected_version": None,
        "depends_on": None,
    }

    @admin.display(description="schedule")
    def schedule(self, job: Job) -> str:
        if job.kind == "cron":
            return job.cron_expression
        if job.kind == "interval":
            return f"every {job.interval_seconds}s"
        if job.kind == "dependent":
            return "after its parents"
        return f"at {job.run_at:%Y-%m-%d %H:%M:%S%z}" if job.run_at else "-"

    @admin.display(description="target")
    def target(self, job: Job) -> str:
        return f"{job.target_kind}: {job.target_url or job.target_name}"

    @admin.display(description=f"last {RECENT_RUNS_SHOWN} runs")
    def recent_runs(self, job: Job) -> str:
        # Bounded on purpose: a minutely job has half a million runs a year.
        runs = job.runs.order_by("-scheduled_for")[:RECENT_RUNS_SHOWN]
        rows = format_html_join(
            "",
            "<tr><td><a href='{}'>{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td></tr>",
            (
                (
                    reverse("admin:jobs_jobrun_change", args=[run.pk]),
                    run.scheduled_for.isoformat(),
                    run.state,
                    run.trigger,
                    run.attempt,
                    run.queued_at.isoformat() if run.queued_at else "-",
                    run.lateness if run.lateness is not None else "-",
                    (run.last_error or "")[:200],
                )
                for run in runs
            ),
        )
        header = (
            "<tr><th>scheduled for</th><th>state</th><th>trigger</th><th>attempt</th>"
            "<th>queued at</th><th>lateness</th><th>last error</th></tr>"
        )
        return format_html("<table>{}{}</table>", mark_safe(header), rows)

    @admin.display(description="next firings")
    def schedule_preview(self, job: Job) -> str:
        fires = next_firings(job, now=clock.now())
        described = (
            format_html("<p>{}</p>", describe_cron(job.cron_expression))
            if job.cron_expression
            else ""
        )
        if not fires:
            return format_html("{}<p>none</p>", described)
        items = format_html_join("", "<li>{}</li>", ((f.isoformat(),) for f in fires))
        return format_html("{}<p>in {}:</p><ol>{}</ol>", described, job.timezone, items)

    @admin.display(description="target headers")
    def header_names(self, job: Job) -> str:
        # Values may be secrets (tokens); only the names are ever shown.
        return ", ".join(sorted(job.target_headers)) or "-"

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A tenant's staff create jobs for their own tenant; staff without one cannot.
        allowed = super().has_add_permission(request)
        return allowed and (request.user.is_superuser or tenant_of(request) is not None)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A cancelled or completed job is history: job_update refuses it, so it is shown
        # read-only instead of offering a form that can only fail.
        if obj is not None and obj.status in (JobStatus.CANCELLED, JobStatus.COMPLETED):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting would drop the run history; the cancel action stops a job through the
        # service, as DELETE in the API does.
        return False

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        tenant = tenant_of(request)
        if request.user.is_superuser:
            tenants = Tenant.objects.filter(is_active=True).order_by("name")
        else:
            tenants = Tenant.objects.filter(pk=tenant.pk) if tenant else Tenant.objects.none()
        return type(form.__name__, (form,), {"allowed_tenants": tenants, "now": clock.now()})

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        editable = obj is None or self.has_change_permission(request, obj)
        readonly = self.get_readonly_fields(request, obj) if obj is not None else ()
        fieldsets: list[tuple[str | None, dict[str, Any]]] = []
        for title, names in self.definition_fieldsets:
            shown = names if editable else self._read_only_names(names)
            placed_here = (
                n
                for n in readonly
                if n in self.readonly_placement and self.readonly_placement[n] == title
            )
            fieldsets.append((title, {"fields": (*shown, *placed_here)}))
        if obj is not None:
            placed = {name for _, opts in fieldsets for name in opts["fields"]}
            rest = tuple(
                name
                for name in readonly
                if name not in placed and name not in self.read_only_substitutes.values()
            )
            fieldsets.append(("State and history", {"fields": rest}))
        return fieldsets

    def _read_only_names(self, names: tuple[str, ...]) -> tuple[str, ...]:
        swapped = (self.read_only_substitutes.get(name, name) for name in names)
        return tuple(name for name in swapped if name is not None)

    def get_urls(self) -> list[URLPattern]:
        def preview(request: HttpRequest) -> HttpResponse:
            # Read-only: anyone who may view jobs may evaluate a schedule.
            if not self.has_view_permission(request):
                raise PermissionDenied
            return schedule_preview_view(request)

        route = path(
            "schedule-preview/",
            self.admin_site.admin_view(preview),
            name="jobs_job_schedule_preview",
        )
        return [route, *super().get_urls()]

    def save_model(self, request: HttpRequest, obj: Job, form: Any, change: bool) -> None:
        # JobAdminForm saved the job through job_create / job_update while it was cleaned.
        return

    @admin.action(description="Pause selected jobs", permissions=["operate"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _run_action(self, request, queryset, "Paused", job_services.job_pause)

    @admin.action(description="Resume selected jobs", permissions=["operate"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _run_action(self, request, queryset, "Resumed", job_services.job_resume)

    @admin.action(description="Cancel selected jobs", permissions=["operate"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _run_action(self, request, queryset, "Cancelled", job_services.job_cancel)

    @admin.action(
        description="Cancel selected jobs and every job depending on them",
        permissions=["operate"],
    )
    def cancel_with_dependents(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _run_action(
            self, request, queryset, "Cancelled", partial(job_services.job_cancel, cascade=True)
        )

    @admin.action(description="Trigger selected jobs now", permissions=["operate"])
    def trigger_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        _run_action(self, request, queryset, "Triggered", job_services.job_trigger_now)


class AttemptInline(admin.TabularInline):  # type: ignore[type-arg]
    model = RunAttempt
    fields = (
        "attempt",
        "epoch",
        "worker",
        "queued_at",
        "started_at",
        "finished_at",
        "outcome",
        "error",
        "stored_result",
    )
    readonly_fields = fields
    extra = 0
    max_num = 0
    can_delete = False

    @admin.display(description="stored result")
    def stored_result(self, attempt: RunAttempt) -> str:
        # The attempt's TaskResult (jobs/services/run_results.py), shown here rather than linked
        # to django-celery-results' own admin, which knows nothing of tenants.
        from django_celery_results.models import TaskResult

        from jobs.services.run_results import result_task_id

        row = TaskResult.objects.filter(task_id=result_task_id(attempt.run_id, attempt.attempt))
        found = row.first()
        if found is None:
            return "—"
        return format_html(
            '<span title="task id {}">{}</span><pre style="white-space:pre-wrap;max-width:40em">'
            "{}</pre>{}",
            found.task_id,
            found.status,
            (found.result or "")[:2000],
            format_html("<details><summary>traceback</summary><pre>{}</pre></details>",
                        found.traceback) if found.traceback else "",
        )  # fmt: skip


@admin.register(JobRun)
class JobRunAdmin(ReadOnlyAdmin):
    list_display = (
        "job",
        "scheduled_for",
        "state",
        "trigger",
        "attempt",
        "queued_at",
        "started_at",
        "finished_at",
        "lateness",
        "worker",
    )
    # By firing date through a list filter, not date_hierarchy: the hierarchy's links come from
    # a SELECT DISTINCT date_trunc(...) over every run (docs/history.md, "Readers").
    list_filter = ("state", "trigger", TENANT_FILTER, "scheduled_for")
    search_fields = ("job__name", "id", "dedup_key")
    list_select_related = ("job",)
    inlines = (AttemptInline,)
    # Newest firing first, ties by id: the index run_by_firing serves it (docs/history.md).
    ordering = ("-scheduled_for", "-id")
    # No count(*) of the whole table per page view (jobs/admin_paginator.py).
    show_full_result_count = False
    paginator = EstimatedCountPaginator


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ("run", "job", "attempts", "moved_at", "replayed_at", "replay_count")
    actions = ("replay",)

    @admin.action(description="Replay selected dead letters (new attempt)", permissions=["operate"])
    def replay(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        now = clock.now()
        replayed = sum(
            1 for letter in queryset if dead_letter_replay(run_id=letter.run_id, now=now)
        )
        skipped = queryset.count() - replayed
        self.message_user(request, f"Replayed {replayed} run(s).")
        if skipped:
            self.message_user(
                request,
                f"{skipped} run(s) were not dead or failed any more and were left alone.",
                level=messages.WARNING,
            )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [field.name for field in DeadLetter._meta.fields]

    list_filter = (TENANT_FILTER,)
    search_fields = ("job__name", "last_error")
    list_select_related = ("job", "run")
    ordering = ("-moved_at",)


@admin.register(DedupKey)
class DedupKeyAdmin(ReadOnlyAdmin):
    list_display = ("key", "tenant", "job", "outcome", "created_at", "expires_at")
    list_filter = ("outcome", TENANT_FILTER)
    search_fields = ("key",)


@admin.register(PartitionEpoch)
class PartitionEpochAdmin(ReadOnlyAdmin):
    list_display = ("partition", "epoch", "owner", "updated_at")
    ordering = ("partition",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[PartitionEpoch]:
        queryset = admin.ModelAdmin.get_queryset(self, request)
        return queryset if request.user.is_superuser else queryset.none()

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)


@admin.register(ArchivedDay)
class ArchivedDayAdmin(ReadOnlyAdmin):
    """Days of run history that left the runs table (docs/history.md, "Archive"): every
    tenant's runs of the day, so superusers only."""

    list_display = ("day", "step", "runs", "attempts", "dead_letters", "directory", "updated_at")
    list_filter = ("step",)
    ordering = ("-day",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[ArchivedDay]:
        queryset = admin.ModelAdmin.get_queryset(self, request)
        return queryset if request.user.is_superuser else queryset.none()

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)


# Admin modules of their own, imported here to register them: the result backend's pages,
# which carry no tenant and are narrowed to superusers, and notification webhooks.
import jobs.admin_results  # noqa: E402
import jobs.admin_target_limits  # noqa: E402
import jobs.admin_webhooks  # noqa: E402, F401
