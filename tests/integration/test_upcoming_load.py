"""The upcoming-load selector: one grouping statement gives the same forecast as job by job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from beat_engine.load_forecast import ScheduleGroup, forecast_load
from jobs.models import Job, JobStatus
from jobs.services.jobs import job_pause, schedule_spec
from jobs.upcoming_load import example_jobs, schedule_groups, upcoming_load
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = pytest.mark.django_db

NOW = T0 + timedelta(hours=1, seconds=20)
DAY = timedelta(hours=24)


@pytest.fixture
def jobs() -> dict[str, object]:
    acme, beta = tenant_factory("acme"), tenant_factory("beta")
    for i in range(12):
        job_factory(acme, name=f"nightly-{i:02d}", cron="0 0 * * *")
    for i in range(4):
        job_factory(acme, name=f"spread-{i}", cron="0 0 * * *", jitter_window=timedelta(minutes=5))
    job_factory(acme, name="paris", cron="30 6 * * *", timezone="Europe/Paris")
    # Anchors whole intervals apart fire together; the third is out of phase by 7 s.
    for i, offset in enumerate((0, 600, 1207)):
        job_factory(
            beta,
            name=f"poll-{i}",
            interval=timedelta(minutes=5),
            anchor_at=T0 + timedelta(seconds=offset),
        )
    job_factory(beta, name="later", interval=timedelta(hours=2), anchor_at=NOW + timedelta(hours=3))
    job_factory(beta, name="soon", run_at=NOW + timedelta(minutes=30))
    job_factory(beta, name="next-week", run_at=NOW + timedelta(days=7))
    paused = job_factory(beta, name="paused", cron="0 0 * * *")
    job_pause(job_id=paused.id, now=T0)
    return {"acme": acme, "beta": beta}


def _one_group_per_job() -> list[ScheduleGroup]:
    groups = []
    for job in Job.objects.filter(status=JobStatus.ACTIVE).select_related("tenant"):
        if job.kind == "once" and not (NOW < job.run_at < NOW + DAY):
            continue
        groups.append(
            ScheduleGroup(
                spec=schedule_spec(job),
                jitter=job.jitter_window,
                tenant=job.tenant.name,
                count=1,
                label=job.name,
            )
        )
    return groups


def test_grouped_forecast_equals_the_job_by_job_forecast(jobs: dict[str, object]) -> None:
    with CaptureQueriesContext(connection) as captured:
        groups, _ = schedule_groups(now=NOW, horizon=DAY)
    reads = [q["sql"] for q in captured.captured_queries if q["sql"].lstrip().startswith("SELECT")]
    # The grouping statement, then the tenants' names: never a statement per job or group.
    assert len(reads) == 2
    assert "FROM jobs_job" in reads[0]
    # 12 + 4 nightly (two jitter windows), paris, two poll phases, later, soon.
    assert sorted((g.tenant, g.label, g.count) for g in groups) == [
        ("acme", "0 0 * * * (UTC)", 4),
        ("acme", "0 0 * * * (UTC)", 12),
        ("acme", "30 6 * * * (Europe/Paris)", 1),
        ("beta", "every 300s", 1),
        ("beta", "every 300s", 2),
        ("beta", "every 7200s", 1),
        ("beta", "one-off", 1),
    ]
    grouped = forecast_load(groups, now=NOW).series
    single = forecast_load(_one_group_per_job(), now=NOW).series
    assert grouped.keys() == single.keys()
    for tenant in grouped:
        assert grouped[tenant] == pytest.approx(single[tenant])
    midnight = int((T0 + timedelta(days=1) - T0.replace(hour=1)) // timedelta(minutes=1))
    assert grouped["acme"][midnight] == pytest.approx(12 + 4 / 5)


def test_tenant_scope_and_peak_drill_down(jobs: dict[str, object]) -> None:
    forecast, _ = upcoming_load(now=NOW, tenant=jobs["beta"])  # type: ignore[arg-type]
    assert list(forecast.series) == ["beta"]
    acme_forecast, acme_keys = upcoming_load(now=NOW, tenant=jobs["acme"])  # type: ignore[arg-type]
    top = acme_forecast.peaks[0]
    assert top.start == T0 + timedelta(days=1)
    assert top.unjittered
    biggest = top.contributions[0].group
    assert biggest.count == 12
    names = [job.name for job in example_jobs(acme_keys[biggest])]
    assert names == ["nightly-00", "nightly-01", "nightly-02"]


def test_examples_of_an_interval_group_are_the_jobs_in_its_phase(jobs: dict[str, object]) -> None:
    groups, keys = schedule_groups(now=NOW, horizon=DAY, tenant=jobs["beta"])  # type: ignore[arg-type]
    polls = sorted(
        (
            sorted(job.name for job in example_jobs(keys[g]))
            for g in groups
            if g.label == "every 300s"
        ),
        key=len,
    )
    assert polls == [["poll-2"], ["poll-0", "poll-1"]]
    (later,) = (g for g in groups if g.label == "every 7200s")
    assert [job.name for job in example_jobs(keys[later])] == ["later"]
    (soon,) = (g for g in groups if g.label == "one-off")
    assert [job.name for job in example_jobs(keys[soon])] == ["soon"]
