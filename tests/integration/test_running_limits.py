"""Running limits at the start and outcome statements, on real PostgreSQL: parking, the release
by the next end or by the reaper, oldest first, the job's limit, and the API's validation."""

from __future__ import annotations

import dataclasses
import re
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db import connections as db_connections
from django.test import Client
from django.urls import reverse

from beat_engine.fencing import epoch_take
from beat_engine.timers import fire_timers
from jobs.models import DecisionReason, Job, JobRun, Tenant
from jobs.models_reasons import ReasonKind
from jobs.services import target_waits
from jobs.services.explain import explain_firing
from jobs.services.jobs import job_input_from, job_update
from jobs.services.runs import run_succeed
from jobs.services.starts import StartOutcome, StartResult, run_start
from jobs.states import RunState
from tests.support.api import api_client_for, error_fields, job_body
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

NOW = T0 + timedelta(days=1)


def _limited(limit: int) -> Tenant:
    tenant = tenant_factory()
    Tenant.objects.filter(id=tenant.id).update(max_running_runs=limit)
    return tenant


def _queued(job: Job, offset_s: int, attempt: int = 1) -> JobRun:
    return run_factory(
        job, scheduled_for=T0 + timedelta(seconds=offset_s), state=RunState.QUEUED,
        attempt=attempt, queued_at=NOW, due_at=None,
    )  # fmt: skip


def _db_now() -> Any:
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        return cursor.fetchone()[0]


def _start(run: JobRun, attempt: int = 1) -> StartResult:
    return run_start(run_id=run.id, attempt=attempt, worker="w", now=NOW)


def _timers(job: Job, *, now: Any = NOW) -> list[Any]:
    epochs = {job.partition: epoch_take(partition=job.partition, node="n", now=now)}
    return [queued.run_id for queued in fire_timers(epochs, now=now, limit=100).queued]


def test_a_run_over_its_tenants_limit_waits_without_spending_an_attempt_and_starts_on_release() -> (
    None
):
    job = job_factory(_limited(2))
    first, second, third = (_queued(job, s) for s in (0, 1, 2))

    assert [_start(r).outcome for r in (first, second)] == [StartOutcome.STARTED] * 2
    held = _start(third)

    assert (held.outcome, held.policy) == (StartOutcome.HELD, "tenant_running")
    parked = JobRun.objects.get(id=third.id)
    assert (parked.state, parked.attempt, parked.held_by) == (
        RunState.RETRY_WAIT, 0, "tenant_running",
    )  # fmt: skip
    assert parked.due_at is not None
    assert parked.due_at > NOW + timedelta(seconds=60)
    assert parked.attempts.count() == 0
    reason = DecisionReason.objects.get(job=job, first_at=third.scheduled_for)
    assert (reason.kind, reason.count) == ("deferred_tenant_limit", 1)
    assert reason.detail == "running limit: tenant had max_running_runs=2 running"
    # "Why didn't it start?" names the limit.
    why = explain_firing(job, third.scheduled_for, now=NOW)
    assert why.verdict == "deferred_tenant_limit"
    assert "held back 1 times by its running limit (tenant had max_running_runs=2 running)" in (
        why.reason
    )
    # Not due before a slot frees: the timers leave it.
    assert _timers(job) == []

    assert run_succeed(run_id=first.id, attempt=1, now=NOW)

    assert JobRun.objects.get(id=third.id).due_at == NOW
    assert _timers(job) == [third.id]
    assert _start(third).outcome == StartOutcome.STARTED
    started = JobRun.objects.get(id=third.id)
    assert (started.state, started.attempt, started.held_by) == (RunState.RUNNING, 1, "")


def test_waiting_runs_are_released_oldest_firing_first_and_a_newcomer_waits_behind_them() -> None:
    job = job_factory(_limited(1))
    running = _queued(job, 0)
    assert _start(running).outcome == StartOutcome.STARTED
    # Parked in the opposite order of their firings.
    late, early = _queued(job, 20), _queued(job, 10)
    assert _start(late).outcome == _start(early).outcome == StartOutcome.HELD

    assert run_succeed(run_id=running.id, attempt=1, now=NOW)
    assert _timers(job) == [early.id]
    # A newer firing arriving while the released one is on its way waits behind the parked one,
    # although no run is running.
    newcomer = _queued(job, 30)
    assert _start(newcomer).outcome == StartOutcome.HELD
    assert _start(early).outcome == StartOutcome.STARTED
    assert JobRun.objects.get(id=late.id).due_at > NOW


def test_free_slots_behind_older_waiting_runs_go_to_them_first() -> None:
    # The limit was raised while runs waited: the next start finds free slots behind them, so it
    # releases them, oldest first, rather than let the slots idle until the backstop; it starts
    # itself only when a slot is left after them.
    tenant = _limited(1)
    job = job_factory(tenant)
    running = _queued(job, 0)
    assert _start(running).outcome == StartOutcome.STARTED
    older, old = _queued(job, 10), _queued(job, 11)
    assert _start(older).outcome == _start(old).outcome == StartOutcome.HELD
    Tenant.objects.filter(id=tenant.id).update(max_running_runs=3)

    newcomer = _queued(job, 20)
    assert _start(newcomer).outcome == StartOutcome.HELD
    assert JobRun.objects.get(id=older.id).due_at == NOW
    assert JobRun.objects.get(id=old.id).due_at == NOW
    assert JobRun.objects.get(id=newcomer.id).due_at > NOW

    # Two slots free (one running, two released on their way), one older run waiting: it is
    # released, and the 30 s firing takes the slot left after it.
    Tenant.objects.filter(id=tenant.id).update(max_running_runs=5)
    assert _start(_queued(job, 30)).outcome == StartOutcome.STARTED
    assert JobRun.objects.get(id=newcomer.id).due_at == NOW


def test_a_jobs_own_limit_holds_its_runs_and_its_next_end_releases_them() -> None:
    tenant = tenant_factory()
    limited = job_factory(tenant, max_running_runs=1)
    other = job_factory(tenant)
    first, second = _queued(limited, 0), _queued(limited, 1)
    assert _start(first).outcome == StartOutcome.STARTED
    held = _start(second)
    assert (held.outcome, held.policy) == (StartOutcome.HELD, "job_running")
    # The tenant has no limit: its other job is not held.
    assert _start(_queued(other, 2)).outcome == StartOutcome.STARTED

    assert run_succeed(run_id=first.id, attempt=1, now=NOW)
    assert _timers(limited) == [second.id]
    assert _start(second).outcome == StartOutcome.STARTED


def test_the_reaper_returns_a_lost_runs_slot_when_its_lease_expires() -> None:
    job = job_factory(_limited(1), max_attempts=1)
    lost = _queued(job, 0)
    assert _start(lost).outcome == StartOutcome.STARTED
    waiting = _queued(job, 10)
    assert _start(waiting).outcome == StartOutcome.HELD
    lease = JobRun.objects.get(id=lost.id).lease_until
    assert lease is not None

    # Before the lease expires the slot is still taken.
    _timers(job, now=lease - timedelta(seconds=1))
    assert JobRun.objects.get(id=waiting.id).due_at > lease
    after = lease + timedelta(seconds=1)
    _timers(job, now=after)

    assert JobRun.objects.get(id=lost.id).state == RunState.DEAD
    assert JobRun.objects.get(id=waiting.id).due_at == after
    assert _timers(job, now=after) == [waiting.id]


def test_concurrent_starts_never_take_more_slots_than_the_limit() -> None:
    # Eight jobs of one tenant, so no job row lock orders the starts: only the tenant's lock.
    tenant = _limited(2)
    runs = [_queued(job_factory(tenant), s) for s in range(8)]
    outcomes: dict[Any, StartOutcome] = {}
    barrier = threading.Barrier(len(runs))

    def start(run: JobRun) -> None:
        try:
            barrier.wait()
            outcomes[run.id] = _start(run).outcome
        finally:
            db_connections.close_all()

    threads = [threading.Thread(target=start, args=(run,)) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(o.value for o in outcomes.values()) == ["held"] * 6 + ["started"] * 2
    assert JobRun.objects.filter(tenant=tenant, state=RunState.RUNNING).count() == 2


def test_unlimited_tenants_runs_start_without_waiting_and_their_outcomes_release_nothing() -> None:
    job = job_factory()
    runs = [_queued(job, s) for s in range(5)]
    results = [_start(r) for r in runs]
    assert [r.outcome for r in results] == [StartOutcome.STARTED] * 5
    # Their outcomes leave the release out (the worker passes release_slot=run.limited).
    assert [r.run is not None and r.run.limited for r in results] == [False] * 5
    limited = _start(_queued(job_factory(_limited(3)), 0)).run
    assert limited is not None
    assert limited.limited


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be between 1 and 100000, or null for no limit"),
        (100_001, "must be between 1 and 100000, or null for no limit"),
        ("2", None),
        (True, None),
    ],
)
def test_the_api_refuses_a_bad_job_limit_with_a_field_error(
    value: Any, message: str | None
) -> None:
    client = api_client_for(f"limits-{id(value)}")

    response = client.post("/v1/jobs", job_body(max_running_runs=value))

    assert response.status_code == 400, response.content
    fields = error_fields(response)
    assert list(fields) == ["max_running_runs"], fields
    if message is not None:
        assert fields["max_running_runs"] == [message]
    assert not Job.objects.filter(tenant=client.tenant).exists()


def test_the_api_sets_shows_and_clears_a_job_limit() -> None:
    client = api_client_for("limits-set")
    created = client.post("/v1/jobs", job_body(max_running_runs=3))
    assert created.status_code == 201, created.content
    assert created.json()["max_running_runs"] == 3
    job_id = created.json()["job_id"]

    cleared = client.patch(f"/v1/jobs/{job_id}", {"max_running_runs": None})

    assert cleared.status_code == 200, cleared.content
    assert cleared.json()["max_running_runs"] is None
    assert Job.objects.get(id=job_id).max_running_runs is None


def test_a_run_its_target_holds_back_hands_its_slot_on() -> None:
    # The per-target rate limit parks a started run (jobs/services/target_waits.py): that run
    # leaves running, so its slot goes to the run waiting for it.
    job = job_factory(_limited(1))
    first, second = _queued(job, 0), _queued(job, 1)
    started = _start(first)
    assert started.run is not None
    assert _start(second).outcome == StartOutcome.HELD

    held = target_waits._park(
        started.run, wait_s=5, now=NOW, kind=ReasonKind.DEFERRED_TARGET_LIMIT, detail="target"
    )

    assert held == target_waits.Held.WAITING
    assert JobRun.objects.get(id=second.id).due_at == NOW


def test_the_status_overview_shows_each_limited_tenants_running_and_waiting_runs() -> None:
    tenant = _limited(2)
    job = job_factory(tenant)
    runs = [_queued(job, s) for s in range(3)]
    assert [_start(r).outcome for r in runs] == [StartOutcome.STARTED] * 2 + [StartOutcome.HELD]
    user = User.objects.create(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)

    body = client.get(reverse("status:overview")).content.decode()

    panel = body[body.index('id="running-limits"') :]
    panel = panel[: panel.index("</div>")]
    row = re.sub(r"\s+", " ", panel[panel.index(f"<td>{tenant.name}</td>") :])
    assert re.match(
        rf'<td>{tenant.name}</td> <td class="num"><meter min="0" max="100" value="100"[^>]*>'
        r'</meter> 2 / 2</td> <td class="num">1</td><td class="num">0</td>',
        row,
    ), row


def test_the_schema_describes_the_job_limit_as_a_nullable_integer() -> None:
    client = api_client_for("limits-schema")
    schemas: dict[str, Any] = client.get("/v1/openapi.json").json()["components"]["schemas"]
    described = {
        name: schema["properties"]["max_running_runs"]
        for name, schema in schemas.items()
        if "max_running_runs" in schema.get("properties", {})
    }

    # The request bodies (create, bulk item, patch) and the job as returned.
    assert len(described) >= 4, sorted(described)
    for name, field in described.items():
        assert field["type"] == "integer", name
        assert field.get("nullable") is True, (name, field)
        assert "running at once" in field["description"], name


def test_raising_a_jobs_limit_releases_the_runs_that_now_fit() -> None:
    job = job_factory(max_running_runs=1)
    running, older, newer = _queued(job, 0), _queued(job, 1), _queued(job, 2)
    assert _start(running).outcome == StartOutcome.STARTED
    assert _start(older).outcome == _start(newer).outcome == StartOutcome.HELD
    job.refresh_from_db()

    job_update(
        job_id=job.id, data=dataclasses.replace(job_input_from(job), max_running_runs=2),
        expected_version=job.version, now=NOW,
    )  # fmt: skip

    assert JobRun.objects.get(id=older.id).due_at == NOW
    assert JobRun.objects.get(id=newer.id).due_at > NOW


def test_an_operator_raising_a_tenants_limit_in_the_admin_releases_the_runs_that_now_fit() -> None:
    tenant = _limited(1)
    job = job_factory(tenant)
    running, older, newer = _queued(job, 0), _queued(job, 1), _queued(job, 2)
    assert _start(running).outcome == StartOutcome.STARTED
    assert _start(older).outcome == _start(newer).outcome == StartOutcome.HELD
    client = Client()
    client.force_login(User.objects.create(username="op", is_staff=True, is_superuser=True))

    response = client.post(
        reverse("admin:jobs_tenant_change", args=[tenant.pk]),
        {
            "name": tenant.name, "is_active": "on", "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00", "max_queued_runs": "100000", "max_running_runs": "",
        },
    )  # fmt: skip

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Tenant.objects.get(id=tenant.id).max_running_runs is None
    # No limit any more: both waiting runs are released.
    assert [JobRun.objects.get(id=r.id).due_at <= _db_now() for r in (older, newer)] == [True] * 2
