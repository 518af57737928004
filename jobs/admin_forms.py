"""The admin's job form: the fields of a JobInput, saved through the job services.

The form only shapes input (which schedule and target fields the chosen kinds use, seconds to
durations, JSON text to values). Every rule about values is the services' own, exactly as for
the API: job_create and job_update validate, and an InvalidInput they raise is shown on the
field it names. The service call happens while the form is cleaned, inside the admin's
transaction, so a refused definition writes nothing and an accepted one is the saved job.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any, ClassVar

from django import forms
from django.db.models import QuerySet
from django.urls import reverse

from beat_engine.schedules import ScheduleError, parse_timezone
from jobs.admin_parents import parent_names_text, resolve_parents, split_names
from jobs.errors import InvalidInput, SchedulerError, VersionConflict
from jobs.models import (
    CatchUpPolicyChoice,
    ConcurrencyPolicy,
    Job,
    JobKind,
    JobSource,
    TargetKind,
    Tenant,
    TriggerRule,
)
from jobs.services.jobs import JobInput, job_create, job_input_from, job_update
from jobs.validation import PRIORITY_HELP

# Same bound as the API's seconds fields: larger values overflow a timedelta.
MAX_SECONDS = 100_000_000
_DEFAULTS = JobInput(name="", target_kind=TargetKind.CALLABLE)
SCHEDULE_KINDS = [
    (JobKind.CRON, "Cron"),
    (JobKind.INTERVAL, "Interval"),
    (JobKind.ONCE, "One-off"),
    (JobKind.DEPENDENT, "After its parents (no schedule of its own)"),
]

# Service field names (as the API reports them) -> the form field that shows the error.
ERROR_FIELDS = {
    "name": "name",
    "schedule": "cron_expression",
    "interval": "interval_seconds",
    "run_at": "run_at",
    "timezone": "timezone",
    "target.kind": "target_kind",
    "target.name": "target_name",
    "target.url": "target_url",
    "target.headers": "target_headers",
    "payload": "payload",
    "queue": "queue",
    "priority": "priority",
    "timeout": "timeout",
    "jitter": "jitter_window",
    "concurrency_policy": "concurrency_policy",
    "catchup.policy": "catchup_policy",
    "catchup.limit": "catchup_limit",
    "catchup.starting_deadline": "starting_deadline",
    "depends_on": "depends_on",
    "trigger_rule": "trigger_rule",
    "rate_limit.group": "target_group",
    "rate_limit.rate_per_s": "target_rate",
    "rate_limit.burst": "target_burst",
    "max_running_runs": "max_running_runs",
}
# RetryPolicy.validate names the offending value at the start of its message.
RETRY_ERROR_FIELDS = {
    "max_attempts": "max_attempts",
    "base_delay": "retry_base_delay",
    "max_delay": "retry_max_delay",
}


def _seconds(label: str, *, initial: timedelta | None, required: bool = True) -> forms.Field:
    return forms.IntegerField(
        label=f"{label} (seconds)",
        required=required,
        min_value=0,
        max_value=MAX_SECONDS,
        initial=int(initial.total_seconds()) if initial is not None else None,
    )


class OptionalJSONField(forms.JSONField):
    """Empty means "not given" and is shown empty, not as the JSON literal null."""

    def prepare_value(self, value: Any) -> Any:
        return "" if value is None else super().prepare_value(value)


def _wall_time(value: datetime, zone_name: str) -> str:
    """The stored instant as wall time in the job's zone, with its offset: saved unchanged it
    reads back as the same instant, even in the repeated hour when clocks go back."""
    try:
        zone = parse_timezone(zone_name)
    except ScheduleError:
        return value.isoformat(sep=" ")
    return value.astimezone(zone).isoformat(sep=" ")


class JobAdminForm(forms.ModelForm):  # type: ignore[type-arg]
    """Create or edit a job; ``JobAdmin.get_form`` sets the class attributes per request."""

    # Set per request by JobAdmin.get_form: which tenants may own the job, and the clock.
    allowed_tenants: ClassVar[QuerySet[Tenant] | None] = None
    now: ClassVar[datetime | None] = None

    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none())
    name = forms.CharField(max_length=1000, strip=False)
    description = forms.CharField(required=False, max_length=10_000, widget=forms.Textarea)
    kind = forms.ChoiceField(label="schedule kind", choices=SCHEDULE_KINDS, initial=JobKind.CRON)
    cron_expression = forms.CharField(
        label="cron expression",
        required=False,
        max_length=1000,
        strip=False,
        help_text="Five fields, minute hour day-of-month month day-of-week (e.g. 0 9 * * 1-5), "
        "or a macro such as @daily; evaluated in the time zone below.",
    )
    interval_seconds = forms.IntegerField(
        label="interval (seconds)", required=False, max_value=MAX_SECONDS
    )
    run_at = forms.CharField(
        label="run at",
        required=False,
        help_text="Wall time in the job's time zone (2026-03-01 09:00), or an instant with a "
        "UTC offset (2026-03-01T09:00+01:00).",
    )
    timezone = forms.CharField(max_length=200, initial=_DEFAULTS.timezone)
    target_kind = forms.ChoiceField(label="target kind", choices=TargetKind.choices)
    target_name = forms.CharField(
        label="target name",
        required=False,
        max_length=255,
        help_text="Registered callable or Celery task name (callable and task targets).",
    )
    target_url = forms.CharField(
        label="target URL", required=False, max_length=2048, help_text="HTTP targets only."
    )
    target_headers = OptionalJSONField(
        label="target headers",
        required=False,
        help_text="HTTP targets only: a JSON object of header names to values, e.g. "
        '{"Authorization": "Bearer ..."}.',
    )
    payload = forms.JSONField(required=False, initial=dict)
    queue = forms.CharField(max_length=200, initial=_DEFAULTS.queue)
    priority = forms.IntegerField(initial=_DEFAULTS.priority, help_text=PRIORITY_HELP)
    max_attempts = forms.IntegerField(label="max attempts", initial=_DEFAULTS.max_attempts)
    retry_base_delay = _seconds("retry base delay", initial=_DEFAULTS.retry_base_delay)
    retry_max_delay = _seconds("retry max delay", initial=_DEFAULTS.retry_max_delay)
    retry_jitter = forms.BooleanField(
        label="retry jitter", required=False, initial=_DEFAULTS.retry_jitter
    )
    retry_on_client_error = forms.BooleanField(
        label="retry on HTTP 4xx", required=False, initial=_DEFAULTS.retry_on_client_error
    )
    timeout = _seconds("timeout", initial=_DEFAULTS.timeout)
    concurrency_policy = forms.ChoiceField(
        label="concurrency policy", choices=ConcurrencyPolicy.choices
    )
    catchup_policy = forms.ChoiceField(label="catch-up policy", choices=CatchUpPolicyChoice.choices)
    catchup_limit = forms.IntegerField(label="catch-up limit", initial=_DEFAULTS.catchup_limit)
    starting_deadline = _seconds("starting deadline", initial=None, required=False)
    jitter_window = _seconds("jitter window", initial=_DEFAULTS.jitter_window)
    # Per-target rate limit (docs/limits.md, "Per-target rate limits").
    target_group = forms.CharField(
        label="rate limit group",
        required=False,
        max_length=255,
        help_text="The group whose bucket the job's runs share (a target limit of the tenant); "
        "empty: the HTTP host of its URL.",
    )
    target_rate = forms.FloatField(
        label="own rate (requests/s)",
        required=False,
        help_text="A bucket of the job's own at this rate, in place of its tenant's limit for "
        "the target; empty: the tenant's limit, if any.",
    )
    target_burst = forms.IntegerField(
        label="own burst", required=False, help_text="The job's own bucket's size (default 1)."
    )
    critical = forms.BooleanField(required=False, initial=_DEFAULTS.critical)
    max_running_runs = forms.IntegerField(
        label="max running runs",
        required=False,
        help_text="Runs of this job running at once, across all workers; empty: no limit of its "
        "own (its tenant's still applies). A run over it waits and starts when a slot frees.",
    )
    depends_on = forms.CharField(
        label="depends on",
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Names of parent jobs of the same tenant, one per line, for the schedule "
        "kind 'After its parents': the job runs once its parents' runs for the same time have "
        "finished, as the trigger rule says.",
    )
    trigger_rule = forms.ChoiceField(
        label="trigger rule", choices=TriggerRule.choices, initial=_DEFAULTS.trigger_rule
    )
    # The version the page was rendered from: the edit applies only if the job is unchanged.
    expected_version = forms.IntegerField(widget=forms.HiddenInput, required=False)

    class Meta:
        model = Job
        fields: tuple[str, ...] = ()

    class Media:
        js = ("jobs/admin_schedule_preview.js",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            if field.label:
                field.label = field.label[:1].upper() + field.label[1:]
        # The live preview (jobs/static/jobs/admin_schedule_preview.js) asks this URL.
        self.fields["cron_expression"].widget.attrs["data-preview-url"] = reverse(
            "admin:jobs_job_schedule_preview"
        )
        tenant_field = self.fields["tenant"]
        assert isinstance(tenant_field, forms.ModelChoiceField)
        tenant_field.queryset = (
            self.allowed_tenants if self.allowed_tenants is not None else Tenant.objects.none()
        )
        if self.editing:
            self._initial_from(self.instance)
        elif tenant_field.queryset.count() == 1:
            tenant_field.initial = tenant_field.queryset.first()

    @property
    def editing(self) -> bool:
        return not self.instance._state.adding

    def _initial_from(self, job: Job) -> None:
        data = job_input_from(job)
        for name in self.fields:
            if hasattr(data, name) and name not in ("target_headers", "run_at"):
                value = getattr(data, name)
                self.initial[name] = (
                    int(value.total_seconds()) if isinstance(value, timedelta) else value
                )
        self.initial.pop("target_headers", None)
        self.initial.update(
            tenant=job.tenant_id,
            kind=job.kind,
            cron_expression=job.cron_expression,
            interval_seconds=job.interval_seconds,
            run_at=_wall_time(job.run_at, job.timezone) if job.run_at else "",
            expected_version=job.version,
        )
        # The tenant is fixed at creation: a job's runs, keys and limits belong to it.
        self.fields["tenant"].disabled = True
        # Header values may be secrets: never echoed into the page, only replaced.
        names = ", ".join(sorted(job.target_headers)) or "none"
        self.fields["target_headers"].help_text = (
            f"Current headers: {names}. Leave empty to keep them, enter {{}} to remove them, "
            "or a JSON object to replace them."
        )
        self.initial["depends_on"] = parent_names_text(job)
        if job.source == JobSource.DECORATOR:
            declared = "Declared in code: the next sync_schedules restores the code's definition."
            self.fields["name"].help_text = declared

    def _post_clean(self) -> None:
        # The services validate and write the whole job; the model's own field-by-field
        # cleaning (and construct_instance) would judge a half-built row by other rules.
        return

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if self.errors:
            return cleaned
        data = self._job_input(cleaned)
        # Shaping the input may have found a missing or unreadable field: then no save.
        if self.errors:
            return cleaned
        self._save(cleaned, data)
        return cleaned

    def _required(self, cleaned: dict[str, Any], name: str, kind: str) -> Any:
        value = cleaned.get(name)
        if value in (None, ""):
            self.add_error(name, f"required for a {kind} job")
        return value

    def _schedule(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        kind = cleaned["kind"]
        out: dict[str, Any] = {"cron": None, "interval": None, "run_at": None}
        if kind == JobKind.DEPENDENT:
            return out
        if kind == JobKind.CRON:
            out["cron"] = self._required(cleaned, "cron_expression", "cron") or ""
        elif kind == JobKind.INTERVAL:
            seconds = self._required(cleaned, "interval_seconds", "interval")
            out["interval"] = timedelta(seconds=seconds) if seconds is not None else None
        else:
            out["run_at"] = self._run_at(self._required(cleaned, "run_at", "one-off"), cleaned)
        return out

    def _parents(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        names = split_names(cleaned.get("depends_on", ""))
        out: dict[str, Any] = {"trigger_rule": cleaned["trigger_rule"], "depends_on": None}
        if cleaned["kind"] == JobKind.DEPENDENT and not names:
            self.add_error("depends_on", "name at least one parent for a job run after its parents")
        if not names:
            return out
        # Given with a schedule kind too: the service refuses the mix, on the schedule field.
        tenant = self.instance.tenant if self.editing else cleaned["tenant"]
        ids, missing = resolve_parents(
            names, tenant_id=tenant.pk, current=self.instance if self.editing else None
        )
        if missing:
            self.add_error("depends_on", f"no live job of this tenant is named {missing[0]!r}")
        out["depends_on"] = ids
        return out

    def _run_at(self, raw: str | None, cleaned: dict[str, Any]) -> datetime | None:
        if not raw:
            return None
        try:
            value = datetime.fromisoformat(raw.strip())
        except ValueError:
            self.add_error("run_at", "enter a date and time such as 2026-03-01 09:00")
            return None
        if value.tzinfo is not None:
            return value
        try:
            return value.replace(tzinfo=parse_timezone(cleaned["timezone"]))
        except ScheduleError as exc:
            self.add_error("timezone", str(exc))
            return None

    def _target(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        kind = cleaned["target_kind"]
        if kind != TargetKind.HTTP:
            # The other kind's inputs are ignored, as the schedule fields of other kinds are.
            return {"target_name": cleaned["target_name"], "target_url": "", "target_headers": {}}
        headers = cleaned.get("target_headers")
        if headers is None:
            headers = dict(self.instance.target_headers) if self.editing else {}
        return {"target_name": "", "target_url": cleaned["target_url"], "target_headers": headers}

    def _job_input(self, cleaned: dict[str, Any]) -> JobInput:
        def duration(name: str) -> timedelta | None:
            value = cleaned.get(name)
            return timedelta(seconds=value) if value is not None else None

        fields: dict[str, Any] = {
            "name": cleaned["name"],
            "description": cleaned["description"],
            "timezone": cleaned["timezone"],
            "target_kind": cleaned["target_kind"],
            "payload": cleaned["payload"] if cleaned.get("payload") is not None else {},
            "target_group": cleaned.get("target_group") or "",
            "target_rate": cleaned.get("target_rate"),
            "target_burst": cleaned.get("target_burst"),
            **{
                name: cleaned[name]
                for name in (
                    "queue",
                    "priority",
                    "max_attempts",
                    "retry_jitter",
                    "retry_on_client_error",
                    "concurrency_policy",
                    "catchup_policy",
                    "catchup_limit",
                    "critical",
                    "max_running_runs",
                )
            },
            **{
                name: duration(name)
                for name in (
                    "retry_base_delay",
                    "retry_max_delay",
                    "timeout",
                    "starting_deadline",
                    "jitter_window",
                )
            },
            **self._schedule(cleaned),
            **self._target(cleaned),
            **self._parents(cleaned),
        }
        if self.editing:
            # Fields the form does not show (anchor, source) keep their stored values.
            return dataclasses.replace(job_input_from(self.instance), **fields)
        return JobInput(source=JobSource.ADMIN, **fields)

    def _save(self, cleaned: dict[str, Any], data: JobInput) -> None:
        now = self.now
        assert now is not None, "JobAdmin.get_form sets the clock"
        version = cleaned.get("expected_version")
        if self.editing and version is None:
            self.add_error(None, "The form lost the job's version; reload the page.")
            return
        try:
            if self.editing:
                job = job_update(
                    job_id=self.instance.id, data=data, expected_version=version, now=now
                )
            else:
                job = job_create(tenant=cleaned["tenant"], data=data, now=now)
        except InvalidInput as exc:
            self._show(exc)
        except VersionConflict as exc:
            self.add_error(
                None,
                f"Someone changed this job while you edited it (it is at version {exc.actual}, "
                f"your page showed version {exc.expected}). Reload the page and apply your "
                "change again.",
            )
        except SchedulerError as exc:
            # InvalidTransition (a finished job) or any other refusal without a field.
            self.add_error(None, str(exc))
        else:
            self.instance = job

    def _show(self, exc: InvalidInput) -> None:
        field: str | None = ERROR_FIELDS.get(exc.field)
        if exc.field == "retries":
            field = next(
                (f for prefix, f in RETRY_ERROR_FIELDS.items() if exc.message.startswith(prefix)),
                "max_attempts",
            )
        if field is None or field not in self.fields:
            self.add_error(None, f"{exc.field}: {exc.message}")
        else:
            self.add_error(field, exc.message)
