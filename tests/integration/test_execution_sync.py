"""sync_schedules: declarations in code become jobs, idempotently; removed ones are paused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from jobs.decorators import ScheduleDeclaration, declared_schedules
from jobs.models import Job, JobSource, JobStatus
from jobs.services.schedules_sync import REMOVED_REASON, schedules_sync
from tests.support.factories import job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _decl(name: str, cron: str = "0 9 * * *", **options: object) -> ScheduleDeclaration:
    return ScheduleDeclaration(
        name, "callable", "demo.heartbeat", cron, None, "Europe/Paris", False, options
    )


def test_sync_creates_then_changes_nothing_when_run_again() -> None:
    report = schedules_sync(tenant_name="team-a", declarations=[_decl("a"), _decl("b")], now=NOW)
    assert report.tenant_created
    assert report.created == ["a", "b"]
    versions = dict(Job.objects.values_list("name", "version"))

    again = schedules_sync(tenant_name="team-a", declarations=[_decl("a"), _decl("b")], now=NOW)

    assert again.unchanged == ["a", "b"]
    assert not (again.created)
    assert not (again.updated)
    assert dict(Job.objects.values_list("name", "version")) == versions
    assert set(Job.objects.values_list("source", flat=True)) == {JobSource.DECORATOR}


def test_sync_updates_a_changed_declaration_and_pauses_a_removed_one() -> None:
    schedules_sync(tenant_name="team-a", declarations=[_decl("a"), _decl("b")], now=NOW)
    later = NOW + timedelta(hours=1)

    report = schedules_sync(
        tenant_name="team-a", declarations=[_decl("a", "30 8 * * *", max_attempts=7)], now=later
    )

    assert report.updated == ["a"]
    assert report.paused == ["b"]
    a, b = Job.objects.get(name="a"), Job.objects.get(name="b")
    assert (a.cron_expression, a.max_attempts, a.version) == ("30 8 * * *", 7, 2)
    assert b.status == JobStatus.PAUSED
    assert b.status_reason == REMOVED_REASON

    back = schedules_sync(
        tenant_name="team-a",
        declarations=[_decl("a", "30 8 * * *", max_attempts=7), _decl("b")],
        now=later,
    )
    assert back.resumed == ["b"]
    assert Job.objects.get(name="b").status == JobStatus.ACTIVE


def test_sync_command_leaves_api_jobs_alone_and_reports_the_conflict(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(declared_schedules, "by_name", {"a": _decl("a"), "c": _decl("c")})
    tenant = tenant_factory("team-b", now=NOW)
    job_factory(tenant, name="a", now=NOW)
    out, err = StringIO(), StringIO()

    with pytest.raises(CommandError, match="1 conflict"):
        call_command("sync_schedules", "--tenant", "team-b", stdout=out, stderr=err)

    assert "created: c" in out.getvalue()
    assert "'a' exists" in err.getvalue()
    assert Job.objects.get(name="a").source == JobSource.API


@pytest.mark.parametrize("zone", ["localtime", "Factory"])
def test_sync_command_refuses_a_declaration_in_a_pseudo_time_zone(
    monkeypatch: pytest.MonkeyPatch, zone: str
) -> None:
    # Such a zone follows each host's own configuration: one job, different instants per host.
    declared = ScheduleDeclaration(
        "a", "callable", "demo.heartbeat", "0 9 * * *", None, zone, False
    )
    monkeypatch.setattr(declared_schedules, "by_name", {"a": declared})

    with pytest.raises(CommandError, match=f"unknown time zone '{zone}'"):
        call_command("sync_schedules", "--tenant", "team-c", stdout=StringIO(), stderr=StringIO())

    assert Job.objects.count() == 0
