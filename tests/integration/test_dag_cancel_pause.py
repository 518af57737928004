"""Cancel and pause in a DAG: a job with live dependents is not cancelled alone (409 naming
them) unless cascade cancels everything below it; the runs the hand-off writes for a paused
job wait as pending, the engine's timers pass them by, and resume releases them."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from beat_engine.fencing import epoch_take
from beat_engine.timers import fire_timers
from jobs.errors import HasDependents
from jobs.models import Job, JobRun, JobStatus, RunTrigger, Tenant
from jobs.services.jobs import JobInput, job_cancel, job_create, job_pause, job_resume
from jobs.states import RunState
from tests.support.api import api_client_for
from tests.support.dags import run_for, running, succeed, the_run
from tests.support.factories import T0, job_factory, run_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

NOW = T0 + timedelta(minutes=5)


def _dependent(tenant: Tenant, name: str, parents: list[Job]) -> Job:
    data = JobInput(
        name=name, target_kind="callable", target_name="demo.heartbeat",
        depends_on=[parent.id for parent in parents],
    )  # fmt: skip
    return job_create(tenant=tenant, data=data, now=T0)


def _dag(tenant: Tenant) -> dict[str, Job]:
    """root -> a -> b, root -> c."""
    root = job_factory(tenant, name="root", cron="0 * * * *")
    a = _dependent(tenant, "a", [root])
    return {
        "root": root,
        "a": a,
        "b": _dependent(tenant, "b", [a]),
        "c": _dependent(tenant, "c", [root]),
    }


def _upstream_run(job: Job, *, state: RunState = RunState.PENDING) -> JobRun:
    """A child's run for T as the hand-off writes it: pending, due at the parent's finish."""
    return run_factory(job, scheduled_for=T0, trigger=RunTrigger.UPSTREAM, state=state, due_at=T0)


def _statuses(jobs: dict[str, Job]) -> dict[str, str]:
    return {name: Job.objects.get(id=job.id).status for name, job in jobs.items()}


def test_cancelling_a_job_with_live_dependents_is_refused_naming_them() -> None:
    jobs = _dag(tenant_factory())
    waiting = _upstream_run(jobs["a"])

    with pytest.raises(HasDependents) as refused:
        job_cancel(job_id=jobs["root"].id, now=NOW)

    # Direct dependents only, by name.
    assert refused.value.dependents == [(str(jobs["a"].id), "a"), (str(jobs["c"].id), "c")]
    assert "'a'" in str(refused.value)
    assert set(_statuses(jobs).values()) == {JobStatus.ACTIVE}
    assert JobRun.objects.get(id=waiting.id).state == RunState.PENDING


def test_cancelled_dependents_no_longer_hold_their_parent() -> None:
    jobs = _dag(tenant_factory())
    job_cancel(job_id=jobs["b"].id, now=NOW)
    job_cancel(job_id=jobs["c"].id, now=NOW)

    job_cancel(job_id=jobs["a"].id, now=NOW)

    assert _statuses(jobs) == {
        "root": JobStatus.ACTIVE, "a": JobStatus.CANCELLED, "b": JobStatus.CANCELLED,
        "c": JobStatus.CANCELLED,
    }  # fmt: skip


def test_cascade_cancels_everything_below_and_its_runs() -> None:
    tenant = tenant_factory()
    jobs = _dag(tenant)
    outside = job_factory(tenant, name="outside", cron="0 * * * *")
    runs = {name: _upstream_run(jobs[name]) for name in ("a", "b", "c")}

    job_cancel(job_id=jobs["root"].id, now=NOW, cascade=True)

    assert set(_statuses(jobs).values()) == {JobStatus.CANCELLED}
    assert Job.objects.get(id=outside.id).status == JobStatus.ACTIVE
    assert {JobRun.objects.get(id=run.id).state for run in runs.values()} == {RunState.CANCELLED}
    b = Job.objects.get(id=jobs["b"].id)
    assert f"'root' ({jobs['root'].id})" in b.status_reason
    assert b.version == 2


def test_delete_answers_409_naming_dependents_or_cascades(redis_client: object) -> None:
    api = api_client_for(f"dag-{uuid.uuid4().hex[:8]}")
    jobs = _dag(api.tenant)
    url = f"/v1/jobs/{jobs['a'].id}"

    refused = api.client.delete(url, headers={"Authorization": f"Bearer {api.key}"})
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "has_dependents"
    assert error["dependents"] == [{"job_id": str(jobs["b"].id), "name": "b"}]

    bad = api.client.delete(f"{url}?cascade=yes", headers={"Authorization": f"Bearer {api.key}"})
    assert bad.status_code == 400
    assert list(bad.json()["error"]["fields"]) == ["cascade"]

    done = api.client.delete(f"{url}?cascade=true", headers={"Authorization": f"Bearer {api.key}"})
    assert done.status_code == 200
    assert _statuses(jobs) == {
        "root": JobStatus.ACTIVE, "a": JobStatus.CANCELLED, "b": JobStatus.CANCELLED,
        "c": JobStatus.ACTIVE,
    }  # fmt: skip


def _fire(jobs: list[Job], *, now: datetime) -> set[uuid.UUID]:
    partitions = {job.partition for job in jobs}
    epochs = {p: epoch_take(partition=p, node="n", now=now) for p in partitions}
    result = fire_timers(epochs, now=now, limit=100)
    assert result.fenced_out is None
    return {queued.run_id for queued in result.queued}


def test_a_paused_jobs_runs_wait_pending_until_it_is_resumed() -> None:
    jobs = _dag(tenant_factory())
    job_pause(job_id=jobs["a"].id, now=T0)
    # A retry of a run that already started goes on: pause holds what has not started.
    retrying = run_factory(
        jobs["a"], scheduled_for=T0 - timedelta(hours=1), state=RunState.RETRY_WAIT, attempt=1,
        due_at=T0,
    )  # fmt: skip
    # A firing the engine claimed ahead, before its job was paused, goes on as it always has.
    solo = job_factory(name="solo", cron="0 * * * *")
    claimed = run_factory(solo, scheduled_for=T0, due_at=T0)
    job_pause(job_id=solo.id, now=T0)
    # The root's run for T succeeds: the hand-off writes a's and c's runs for T, pending.
    succeed(running(jobs["root"], scheduled_for=T0, now=T0), now=T0 + timedelta(seconds=1))
    held, other = the_run(jobs["a"], T0), the_run(jobs["c"], T0)
    assert (held.state, other.state) == (RunState.PENDING, RunState.PENDING)

    queued = _fire([*jobs.values(), solo], now=NOW)

    assert queued == {retrying.id, other.id, claimed.id}
    assert JobRun.objects.get(id=held.id).state == RunState.PENDING
    # b waits too: its parent's run for T has not finished, so the hand-off wrote nothing.
    assert run_for(jobs["b"], T0) is None

    job_resume(job_id=jobs["a"].id, now=NOW)
    resumed = Job.objects.get(id=jobs["a"].id)
    # A dependent job resumed still never fires on its own.
    assert (resumed.status, resumed.next_fire_at) == (JobStatus.ACTIVE, None)

    assert _fire(list(jobs.values()), now=NOW + timedelta(seconds=1)) == {held.id}
    # And the DAG goes on below it.
    started = JobRun.objects.filter(id=held.id, state=RunState.QUEUED).update(
        state=RunState.RUNNING, started_at=NOW, lease_until=NOW + timedelta(minutes=1)
    )
    assert started == 1
    succeed(JobRun.objects.get(id=held.id), now=NOW + timedelta(seconds=2))
    assert the_run(jobs["b"], T0).state == RunState.PENDING
