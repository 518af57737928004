"""The admin creates and edits jobs of every kind through the job services' validation."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from beat_engine.clock import SystemClock
from jobs.models import Job, JobSource, JobStatus
from jobs.services.jobs import job_pause
from tests.support import targets  # noqa: F401  (registers the test targets here too)
from tests.support.admin import form_data
from tests.support.factories import job_factory, tenant_factory

pytestmark = pytest.mark.django_db

ADD = reverse("admin:jobs_job_add")
# A public address literal: the SSRF policy accepts it without resolving anything.
HOOK = "https://93.184.216.34/hook"


@pytest.fixture
def client() -> Client:
    # No password: force_login needs none, and hashing one costs more than the test.
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


def errors_of(response: Any) -> dict[str, list[str]]:
    form = response.context["adminform"].form
    return {key: [str(e) for e in value] for key, value in form.errors.items()}


def test_create_cron_job_with_every_policy(client: Client) -> None:
    tenant = tenant_factory()
    response = client.post(
        ADD,
        form_data(
            tenant.pk,
            description="weekday sales mail",
            priority=7,
            max_attempts=5,
            retry_base_delay=20,
            retry_max_delay=900,
            retry_jitter=None,
            retry_on_client_error="on",
            timeout=60,
            concurrency_policy="forbid",
            catchup_policy="run_once",
            catchup_limit=10,
            starting_deadline=120,
            jitter_window=30,
            critical="on",
            queue="reports",
        ),
    )

    assert response.status_code == 302, errors_of(response)
    job = Job.objects.get(name="nightly-report")
    assert (job.tenant, job.kind, job.cron_expression) == (tenant, "cron", "0 9 * * 1-5")
    assert (job.timezone, job.source, job.status) == ("Europe/Paris", JobSource.ADMIN, "active")
    assert job.payload == {"report": "sales"}
    assert (job.priority, job.queue, job.critical) == (7, "reports", True)
    assert (job.max_attempts, job.retry_jitter, job.retry_on_client_error) == (5, False, True)
    assert (job.retry_base_delay, job.retry_max_delay) == (
        timedelta(seconds=20),
        timedelta(seconds=900),
    )
    assert (job.timeout, job.starting_deadline, job.jitter_window) == (
        timedelta(seconds=60),
        timedelta(seconds=120),
        timedelta(seconds=30),
    )
    assert (job.concurrency_policy, job.catchup_policy, job.catchup_limit) == (
        "forbid",
        "run_once",
        10,
    )
    # The service computed the first firing: 09:00 Paris on a weekday.
    assert job.next_fire_at is not None
    local = job.next_fire_at.astimezone(ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute, local.weekday() < 5) == (9, 0, True)


def test_create_interval_job(client: Client) -> None:
    tenant = tenant_factory()
    response = client.post(
        ADD, form_data(tenant.pk, kind="interval", cron_expression="", interval_seconds=90)
    )

    assert response.status_code == 302, errors_of(response)
    job = Job.objects.get(name="nightly-report")
    assert (job.kind, job.interval_seconds, job.cron_expression) == ("interval", 90, "")


def test_create_one_off_job_reads_wall_time_in_the_jobs_zone(client: Client) -> None:
    tenant = tenant_factory()
    when = SystemClock().now() + timedelta(days=3)
    wall = when.astimezone(ZoneInfo("America/New_York"))
    response = client.post(
        ADD,
        form_data(
            tenant.pk,
            kind="once",
            cron_expression="",
            timezone="America/New_York",
            run_at=wall.strftime("%Y-%m-%d %H:%M:%S"),
        ),
    )

    assert response.status_code == 302, errors_of(response)
    job = Job.objects.get(name="nightly-report")
    assert job.kind == "once"
    assert job.run_at == when.replace(microsecond=0)


def test_create_http_job_with_headers(client: Client) -> None:
    tenant = tenant_factory()
    response = client.post(
        ADD,
        form_data(
            tenant.pk,
            target_kind="http",
            target_name="",
            target_url=HOOK,
            target_headers='{"Authorization": "Bearer s3cret-token"}',
        ),
    )

    assert response.status_code == 302, errors_of(response)
    job = Job.objects.get(name="nightly-report")
    assert (job.target_kind, job.target_url) == ("http", HOOK)
    assert job.target_headers == {"Authorization": "Bearer s3cret-token"}
    page = client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()
    # The header's name is listed; its value (a secret) never reaches the page.
    assert "Authorization" in page
    assert "s3cret-token" not in page


def test_create_task_job(client: Client) -> None:
    tenant = tenant_factory()
    response = client.post(
        ADD, form_data(tenant.pk, target_kind="task", target_name="tests.task_target")
    )

    assert response.status_code == 302, errors_of(response)
    assert Job.objects.get(name="nightly-report").target_kind == "task"


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"cron_expression": "61 * * * *"}, "cron_expression", "minute"),
        ({"cron_expression": "0 0 31 2 *"}, "cron_expression", "never"),
        ({"cron_expression": ""}, "cron_expression", "required for a cron job"),
        ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone"),
        ({"kind": "interval", "interval_seconds": 0}, "interval_seconds", "at least 1 second"),
        ({"kind": "once", "run_at": "2020-01-01 00:00"}, "run_at", "in the past"),
        ({"target_name": "no.such.callable"}, "target_name", "no callable is registered"),
        ({"name": "   "}, "name", "non-empty"),
        ({"queue": "bad queue!"}, "queue", "letters, digits"),
        ({"priority": 12}, "priority", "between 0 (highest) and 9 (lowest)"),
        ({"max_attempts": 0}, "max_attempts", "max_attempts"),
        ({"retry_max_delay": 1}, "retry_max_delay", "must not be shorter"),
        ({"timeout": 0}, "timeout", "between 1 second"),
        ({"jitter_window": 7200}, "jitter_window", "between 0 and 3600"),
        ({"catchup_limit": 5000}, "catchup_limit", "between 1 and 1000"),
        ({"starting_deadline": 0}, "starting_deadline", "at least 1 second"),
        ({"payload": "[1, 2"}, "payload", "JSON"),
        (
            {"target_kind": "http", "target_name": "", "target_url": "ftp://example.test/x"},
            "target_url",
            "https",
        ),
    ],
)
def test_service_errors_show_on_their_field_and_nothing_is_saved(
    client: Client, overrides: dict[str, Any], field: str, message: str
) -> None:
    tenant = tenant_factory()
    response = client.post(ADD, form_data(tenant.pk, **overrides))

    assert response.status_code == 200
    errors = errors_of(response)
    assert field in errors, errors
    assert any(message in text for text in errors[field]), errors
    assert not Job.objects.exists()


def test_duplicate_name_is_a_name_error(client: Client) -> None:
    tenant = tenant_factory()
    job_factory(tenant, name="nightly-report")

    response = client.post(ADD, form_data(tenant.pk))

    assert "already exists" in errors_of(response)["name"][0]
    assert Job.objects.count() == 1


def _edit_data(job: Job, **overrides: Any) -> dict[str, Any]:
    base = form_data(
        job.tenant_id,
        name=job.name,
        timezone=job.timezone,
        cron_expression=job.cron_expression,
        payload="{}",
        expected_version=job.version,
    )
    base.pop("tenant")
    base.update(overrides)
    return base


def test_edit_changes_the_schedule_through_job_update(client: Client) -> None:
    job = job_factory(cron="* * * * *", timezone="UTC")
    url = reverse("admin:jobs_job_change", args=[job.pk])

    response = client.post(
        url, _edit_data(job, cron_expression="30 6 * * *", timezone="Asia/Tokyo")
    )

    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.cron_expression, job.timezone, job.version) == ("30 6 * * *", "Asia/Tokyo", 2)
    assert job.next_fire_at is not None
    local = job.next_fire_at.astimezone(ZoneInfo("Asia/Tokyo"))
    assert (local.hour, local.minute) == (6, 30)


def test_edit_with_a_stale_version_is_refused(client: Client) -> None:
    job = job_factory(cron="* * * * *")
    stale = job.version
    job_pause(job_id=job.id, now=job.created_at)  # someone else changes it: version 2
    url = reverse("admin:jobs_job_change", args=[job.pk])

    response = client.post(
        url, _edit_data(job, cron_expression="0 1 * * *", expected_version=stale)
    )

    assert response.status_code == 200
    assert "Someone changed this job" in errors_of(response)["__all__"][0]
    job.refresh_from_db()
    assert (job.cron_expression, job.version, job.status) == ("* * * * *", 2, JobStatus.PAUSED)


def test_edit_error_changes_nothing(client: Client) -> None:
    job = job_factory(cron="* * * * *")
    url = reverse("admin:jobs_job_change", args=[job.pk])

    response = client.post(url, _edit_data(job, cron_expression="0 0 30 2 *", priority=3))

    assert "never" in errors_of(response)["cron_expression"][0]
    job.refresh_from_db()
    assert (job.cron_expression, job.priority, job.version) == ("* * * * *", 5, 1)


def test_edit_keeps_headers_left_empty_and_replaces_given_ones(client: Client) -> None:
    job = job_factory(
        target_kind="http", target_name="", target_url=HOOK, target_headers={"X-Token": "a1"}
    )
    url = reverse("admin:jobs_job_change", args=[job.pk])
    http = {"target_kind": "http", "target_name": "", "target_url": HOOK}

    kept = client.post(url, _edit_data(job, **http, priority=4))
    job.refresh_from_db()
    assert kept.status_code == 302, errors_of(kept)
    assert (job.priority, job.target_headers) == (4, {"X-Token": "a1"})

    client.post(url, _edit_data(job, **http, target_headers='{"X-Other": "b2"}'))
    job.refresh_from_db()
    assert job.target_headers == {"X-Other": "b2"}


def test_tenant_cannot_be_changed_on_edit(client: Client) -> None:
    job = job_factory(cron="* * * * *")
    other = tenant_factory()
    url = reverse("admin:jobs_job_change", args=[job.pk])

    response = client.post(url, {**_edit_data(job, priority=2), "tenant": other.pk})

    # The field is disabled: the posted tenant is ignored, the rest of the edit applies.
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.tenant_id, job.priority) == (job.tenant_id, 2)
    assert job.tenant_id != other.pk


def test_change_page_previews_next_firings_in_the_jobs_zone(client: Client) -> None:
    job = job_factory(cron="0 9 * * 1-5", timezone="Europe/Paris")

    page = client.get(reverse("admin:jobs_job_change", args=[job.pk])).content.decode()

    assert "At 09:00, Monday through Friday" in page
    # Ten instants, each written with Paris's offset (+01:00 in winter, +02:00 in summer).
    assert page.count("T09:00:00+0") == 10


def test_cancelled_job_is_read_only(client: Client) -> None:
    job = job_factory(cron="* * * * *")
    Job.objects.filter(pk=job.pk).update(status=JobStatus.CANCELLED)
    url = reverse("admin:jobs_job_change", args=[job.pk])

    page = client.get(url)
    client.post(url, _edit_data(job, priority=1))

    assert 'name="priority"' not in page.content.decode()
    job.refresh_from_db()
    assert job.priority == 5


PREVIEW = reverse("admin:jobs_job_schedule_preview")


def test_live_preview_describes_the_typed_schedule_in_its_zone(client: Client) -> None:
    page = client.get(ADD).content.decode()
    data = client.get(
        PREVIEW, {"kind": "cron", "cron_expression": "0 9 * * 1-5", "timezone": "Europe/Paris"}
    ).json()

    assert "jobs/admin_schedule_preview.js" in page
    assert f'data-preview-url="{PREVIEW}"' in page
    assert data["description"] == "At 09:00, Monday through Friday"
    assert len(data["firings"]) == 10
    assert all(f[10:19] == "T09:00:00" and f[19:] in ("+01:00", "+02:00") for f in data["firings"])


@pytest.mark.parametrize(
    ("params", "error"),
    [
        ({"kind": "cron", "cron_expression": "0 0 31 2 *"}, "never fires"),
        ({"kind": "cron", "cron_expression": "* * *"}, "expected 5 fields"),
        ({"kind": "interval", "interval_seconds": "abc"}, "whole number"),
        ({"kind": "once", "run_at": "tomorrow"}, "date and time"),
        ({"kind": "cron", "cron_expression": "* * * * *", "timezone": "Mars/Base"}, "time zone"),
    ],
)
def test_live_preview_names_what_is_wrong(
    client: Client, params: dict[str, str], error: str
) -> None:
    data = client.get(PREVIEW, params).json()

    assert error in data["error"]
    assert not Job.objects.exists()


def test_live_preview_of_an_interval(client: Client) -> None:
    data = client.get(PREVIEW, {"kind": "interval", "interval_seconds": "90", "timezone": "UTC"})

    firings = [datetime.fromisoformat(f) for f in data.json()["firings"]]
    assert [b - a for a, b in itertools.pairwise(firings)] == [timedelta(seconds=90)] * 9


def test_live_preview_needs_an_admin_login() -> None:
    response = Client().get(PREVIEW, {"cron_expression": "* * * * *"})

    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_change_page_groups_definition_then_state(client: Client) -> None:
    job = job_factory(cron="* * * * *")

    response = client.get(reverse("admin:jobs_job_change", args=[job.pk]))

    fieldsets = {name: opts["fields"] for name, opts in response.context["adminform"].fieldsets}
    assert fieldsets[None] == ("tenant", "name", "description", "expected_version")
    assert "schedule_preview" in fieldsets["Schedule"]
    assert {"recent_runs", "status", "version"} <= set(fieldsets["State and history"])
    assert "header_names" not in {name for names in fieldsets.values() for name in names}


def test_one_off_edit_keeps_an_instant_in_the_repeated_hour(client: Client) -> None:
    # 02:30 on 25 October 2026 happens twice in Paris; this is the second (+01:00) one.
    second = datetime.fromisoformat("2026-10-25T02:30:00.250000+01:00")
    job = job_factory(run_at=second, timezone="Europe/Paris", now=second - timedelta(days=1))
    url = reverse("admin:jobs_job_change", args=[job.pk])

    shown = client.get(url).context["adminform"].form.initial["run_at"]
    data = _edit_data(job, kind="once", cron_expression="", run_at=shown, priority=3)
    response = client.post(url, data)

    assert shown == "2026-10-25 02:30:00.250000+01:00"
    assert response.status_code == 302, errors_of(response)
    job.refresh_from_db()
    assert (job.run_at, job.priority) == (second, 3)
