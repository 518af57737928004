"""The upcoming-load and "why didn't it fire?" pages: scope, bad input, verdicts, drill-down."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from beat_engine.db_clock import read_database_clock
from jobs.models import Job, Tenant, TenantMember
from jobs.models_reasons import JobEvent, JobEventKind
from jobs.services.jobs import job_pause
from jobs.states import RunState
from tests.support.factories import job_factory, run_factory, tenant_factory

pytestmark = pytest.mark.django_db


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _staff_of(tenant: Tenant) -> Client:
    user = User.objects.create_user(f"staff-{tenant.name}", password="pw-unused-123", is_staff=True)
    TenantMember.objects.create(user=user, tenant=tenant)
    return _client(user)


@pytest.fixture
def superuser() -> Client:
    return _client(User.objects.create_superuser("root", "root@example.com", "pw-unused-123"))


@pytest.fixture
def herd() -> dict[str, Job]:
    created = read_database_clock() - timedelta(days=1)
    reports, ops = tenant_factory("reports"), tenant_factory("ops")
    jobs = [job_factory(reports, name=f"nightly-{i:02d}", cron="0 0 * * *", now=created)
            for i in range(25)]  # fmt: skip
    probe = job_factory(ops, name="ops-probe", cron="*/30 * * * *", now=created)
    return {"nightly": jobs[0], "probe": probe}


def _points(html: str) -> int:
    match = re.search(r'id="upcoming-chart">\s*<svg[^>]*data-points="(\d+)"', html)
    assert match, "no chart"
    return int(match.group(1))


def test_upcoming_shows_the_midnight_herd_with_a_jitter_hint(
    superuser: Client, herd: dict[str, Job]
) -> None:
    response = superuser.get("/status/upcoming/")
    assert response.status_code == 200
    html = response.content.decode()
    # 48 half-hourly probe firings plus the midnight herd, each a drawn bar layer.
    assert _points(html) >= 48
    peaks = html[html.index('id="peaks"') :]
    first = peaks[: peaks.index("</tr>", peaks.index("<tbody>"))]
    assert ">25<" in first  # the busiest minute: 25 nightly jobs
    assert "0 0 * * * (UTC)" in first
    assert f"/status/jobs/{herd['nightly'].pk}/" in first
    assert "no jitter" in first
    assert "A herd" in first


def test_upcoming_for_tenant_staff_shows_only_their_tenant(herd: dict[str, Job]) -> None:
    ops = Tenant.objects.get(name="ops")
    html = _staff_of(ops).get("/status/upcoming/").content.decode()
    assert "ops-probe" in html
    assert "nightly-" not in html
    assert "reports" not in html


def test_status_pages_need_a_login() -> None:
    for path in ("/status/upcoming/", "/status/why/"):
        response = Client().get(path)
        assert response.status_code == 302
        assert "/admin/login/" in response["Location"]


def _paused_job(tenant: Tenant) -> tuple[Job, object]:
    now = read_database_clock()
    job = job_factory(tenant, name="rotate-logs", cron="0 * * * *", now=now - timedelta(days=1))
    job_pause(job_id=job.id, now=now)
    # The pause happened three hours ago in this story (the service records the database's now).
    JobEvent.objects.filter(job_id=job.id, kind=JobEventKind.PAUSED).update(
        at=now - timedelta(hours=3)
    )
    return job, now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)


def test_why_explains_a_firing_missed_while_paused(superuser: Client) -> None:
    job, missed = _paused_job(tenant_factory("ops"))
    response = superuser.get("/status/why/", {"job": job.pk, "at": missed.isoformat()})
    assert response.status_code == 200
    html = response.content.decode()
    assert 'class="badge verdict verdict-paused"' in html
    assert "the job was paused at" in html.lower()
    # Recent firings link back to the same page for each instant.
    assert f"?job={job.pk}&amp;at=" in html


def test_why_names_the_run_that_fired(superuser: Client) -> None:
    now = read_database_clock()
    job = job_factory(tenant_factory("pay"), cron="*/5 * * * *", now=now - timedelta(days=1))
    due = now.replace(second=0, microsecond=0) - timedelta(minutes=now.minute % 5 + 5)
    run = run_factory(job, scheduled_for=due, state=RunState.SUCCEEDED, attempt=1,
                      finished_at=due + timedelta(seconds=1), lateness=timedelta(milliseconds=80),
                      due_at=None)  # fmt: skip
    # Naive: read in the job's zone (UTC here).
    at = due.replace(tzinfo=None).isoformat()
    html = superuser.get("/status/why/", {"job": job.pk, "at": at}).content.decode()
    assert "verdict-fired" in html
    assert f"/status/runs/{run.pk}/" in html


def test_why_reads_a_naive_instant_in_the_jobs_zone(superuser: Client) -> None:
    now = read_database_clock()
    job = job_factory(
        tenant_factory("paris"), cron="0 9 * * *", timezone="Europe/Paris",
        now=now - timedelta(days=400),
    )  # fmt: skip
    # 09:00 in Paris is a firing; the same wall time read as UTC would not be.
    html = superuser.get("/status/why/", {"job": job.pk, "at": "2026-01-14T09:00"}).content
    assert b"fires then</dt><dd>yes" in html


def test_why_bad_input_is_a_400_with_the_fields_error(superuser: Client) -> None:
    response = superuser.get("/status/why/", {"job": "not-a-uuid", "at": "x"})
    assert response.status_code == 400
    assert b"valid UUID" in response.content
    job = job_factory(tenant_factory("ops"), now=read_database_clock())
    response = superuser.get("/status/why/", {"job": job.pk, "at": "yesterday-ish"})
    assert response.status_code == 400
    assert b"not an ISO 8601 instant" in response.content
    response = superuser.get("/status/why/", {"job": job.pk, "at": "0001-01-01T00:00:00+05:00"})
    assert response.status_code == 400
    assert b"must lie from 1970-01-01" in response.content


def test_why_for_another_tenants_job_is_a_404() -> None:
    mine, theirs = tenant_factory("mine"), tenant_factory("theirs")
    job = job_factory(theirs, now=read_database_clock())
    response = _staff_of(mine).get("/status/why/", {"job": job.pk, "at": "2026-01-01T00:00Z"})
    assert response.status_code == 404
    assert _staff_of(theirs).get("/status/why/", {"job": job.pk}).status_code == 200


def test_why_without_parameters_shows_the_form(superuser: Client) -> None:
    response = superuser.get("/status/why/")
    assert response.status_code == 200
    assert b'id="why-form"' in response.content
    assert b"verdict" not in response.content
