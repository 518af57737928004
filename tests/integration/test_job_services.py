"""Job services validate before writing and keep next_fire_at, status and version right."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from jobs.errors import InvalidInput, InvalidTransition, TargetNotFound, VersionConflict
from jobs.models import Job, JobRun, JobStatus
from jobs.services.jobs import (
    JobInput,
    job_cancel,
    job_create,
    job_input_from,
    job_pause,
    job_resume,
    job_trigger_now,
    job_update,
)
from jobs.states import RunState
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = pytest.mark.django_db


# An HTTP target's definition starts from a callable one: the name must go with the kind.
HTTP = {"target_kind": "http", "target_name": ""}


def _input(**overrides: object) -> JobInput:
    fields: dict[str, object] = {
        "name": "nightly",
        "target_kind": "callable",
        "target_name": "demo.heartbeat",
        "cron": "0 9 * * *",
        "timezone": "Europe/Paris",
    }
    fields.update(overrides)
    return JobInput(**fields)  # type: ignore[arg-type]


def test_cron_job_next_fire_is_in_its_timezone() -> None:
    job = job_create(tenant=tenant_factory(), data=_input(), now=T0)
    # 09:00 in Paris in January is 08:00 UTC.
    assert job.next_fire_at == datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
    assert job.status == JobStatus.ACTIVE
    assert job.version == 1


def test_interval_job_is_anchored_to_its_start() -> None:
    anchor = T0 + timedelta(seconds=7)
    job = job_create(
        tenant=tenant_factory(),
        data=_input(cron=None, interval=timedelta(seconds=30), anchor_at=anchor),
        now=T0 + timedelta(minutes=1),
    )
    # Fires at :07, :37, 1:07 ... after the anchor, never re-based on the creation time.
    assert job.next_fire_at == anchor + timedelta(seconds=60)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"cron": "0 0 30 2 *"}, "schedule"),
        ({"cron": "61 * * * *"}, "schedule"),
        ({"timezone": "PST"}, "timezone"),
        ({"interval": timedelta(seconds=10)}, "schedule"),
        ({"cron": None}, "schedule"),
        ({"cron": None, "run_at": T0 - timedelta(days=1)}, "run_at"),
        ({"cron": None, "run_at": datetime(2026, 1, 2, 9, 0)}, "run_at"),  # noqa: DTZ001
        ({"cron": None, "run_at": T0 + timedelta(days=9000)}, "run_at"),
        ({"target_kind": "shell"}, "target.kind"),
        ({"target_name": "os.system"}, "target.name"),
        ({**HTTP, "target_url": "http://169.254.169.254/latest"}, "target.url"),
        ({**HTTP, "target_url": "https://user:pw@partner.invalid/"}, "target.url"),
        (
            {
                **HTTP,
                "target_url": "https://partner.invalid/",
                "target_headers": {"X-Evil": "a\r\nHost: b"},
            },
            "target.headers",
        ),
        ({**HTTP, "target_url": "https://[::127.0.0.1]/"}, "target.url"),
        ({**HTTP, "target_url": "https://127.0.0.1:99999/"}, "target.url"),
        ({**HTTP, "target_url": "https://[::1/"}, "target.url"),
        ({"target_kind": "http", "target_url": "https://93.184.216.34/"}, "target.name"),
        ({"target_url": "https://93.184.216.34/"}, "target.url"),
        ({"target_headers": {"X-Token": "t"}}, "target.headers"),
        ({"timezone": "localtime"}, "timezone"),
        ({"timezone": "Factory"}, "timezone"),
        ({"payload": {"x": float("nan")}}, "payload"),
        ({"payload": {"blob": "x" * 300_000}}, "payload"),
        ({"max_attempts": 0}, "retries"),
        ({"retry_base_delay": timedelta(0)}, "retries"),
        ({"timeout": timedelta(days=30)}, "timeout"),
        ({"jitter_window": timedelta(hours=2)}, "jitter"),
        (
            {
                "cron": None,
                "interval": timedelta(seconds=30),
                "jitter_window": timedelta(seconds=30),
            },
            "jitter",
        ),
        ({"name": ""}, "name"),
        ({"queue": "bad queue!"}, "queue"),
        ({"concurrency_policy": "yolo"}, "concurrency_policy"),
    ],
)
def test_bad_input_is_refused_and_nothing_is_written(
    overrides: dict[str, object], field: str
) -> None:
    tenant = tenant_factory()
    with pytest.raises(InvalidInput) as caught:
        job_create(tenant=tenant, data=_input(**overrides), now=T0)
    assert caught.value.field == field, caught.value
    assert Job.objects.count() == 0


def test_unregistered_callable_is_target_not_found() -> None:
    with pytest.raises(TargetNotFound):
        job_create(tenant=tenant_factory(), data=_input(target_name="nope"), now=T0)


def test_update_with_stale_version_changes_nothing() -> None:
    job = job_factory(cron="0 9 * * *")
    data = job_input_from(job)
    job_update(job_id=job.id, data=data, expected_version=1, now=T0)
    with pytest.raises(VersionConflict):
        job_update(
            job_id=job.id,
            data=JobInput(**{**data.__dict__, "cron": "0 10 * * *"}),
            expected_version=1,
            now=T0,
        )
    job.refresh_from_db()
    assert job.cron_expression == "0 9 * * *"
    assert job.version == 2


def test_schedule_change_recomputes_next_fire() -> None:
    job = job_factory(cron="0 9 * * *")
    data = JobInput(**{**job_input_from(job).__dict__, "cron": "30 12 * * *"})
    updated = job_update(job_id=job.id, data=data, expected_version=job.version, now=T0)
    assert updated.next_fire_at == datetime(2026, 1, 1, 12, 30, tzinfo=UTC)


def test_pause_resume_keeps_missed_firing_for_catch_up() -> None:
    job = job_factory(cron="*/5 * * * *")
    paused = job_pause(job_id=job.id, now=T0)
    assert paused.status == JobStatus.PAUSED
    resumed = job_resume(job_id=job.id, now=T0 + timedelta(hours=1))
    assert resumed.status == JobStatus.ACTIVE
    # The firing due while paused is still there for the engine's catch-up policy.
    assert resumed.next_fire_at == T0 + timedelta(minutes=5)
    assert resumed.version == 3


def test_cancel_stops_future_firings_and_waiting_runs() -> None:
    job = job_factory()
    waiting = run_factory(job, scheduled_for=T0 + timedelta(minutes=1))
    running = run_factory(
        job,
        scheduled_for=T0,
        state=RunState.RUNNING,
        attempt=1,
        started_at=T0,
        lease_until=T0 + timedelta(seconds=30),
    )
    cancelled = job_cancel(job_id=job.id, now=T0)
    assert cancelled.status == JobStatus.CANCELLED
    assert cancelled.next_fire_at is None
    waiting.refresh_from_db()
    running.refresh_from_db()
    assert waiting.state == RunState.CANCELLED
    assert running.state == RunState.RUNNING
    assert running.cancel_requested
    with pytest.raises(InvalidTransition):
        job_pause(job_id=job.id, now=T0)


def test_trigger_now_creates_a_pending_run_due_now() -> None:
    job = job_factory()
    run = job_trigger_now(job_id=job.id, now=T0 + timedelta(seconds=3))
    assert run.state == RunState.PENDING
    assert run.due_at == T0 + timedelta(seconds=3)
    assert JobRun.objects.filter(job=job).count() == 1


def test_cancelled_name_can_be_reused() -> None:
    job = job_factory(name="reused")
    job_cancel(job_id=job.id, now=T0)
    again = job_factory(job.tenant, name="reused")
    assert again.id != job.id
    with pytest.raises(InvalidInput, match="already exists"):
        job_factory(job.tenant, name="reused")
