"""Declaring dependencies: every refusal names its field and writes nothing; cycles are named;
every root of a job's DAG keeps one schedule, through creates, bulk creates and PATCHes."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction

from jobs.errors import InvalidInput
from jobs.models import Job, JobDependency, JobKind, JobStatus, Tenant
from jobs.services.dependencies import MAX_PARENTS
from jobs.services.job_intake import job_create_many, job_patch
from jobs.services.jobs import JobInput, job_cancel, job_create
from tests.support.api import ApiClient, api_client_for
from tests.support.factories import T0, job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

HOURLY = "0 * * * *"


def _child(tenant: Tenant, parents: list[Job], **fields: Any) -> Job:
    data = JobInput(
        name=fields.pop("name", f"child-{uuid.uuid4().hex[:8]}"),
        target_kind="callable",
        target_name="demo.heartbeat",
        depends_on=[parent.id for parent in parents],
        **fields,
    )
    return job_create(tenant=tenant, data=data, now=T0)


def _edges(tenant: Tenant) -> set[tuple[str, str]]:
    return set(
        JobDependency.objects.filter(tenant=tenant).values_list("parent__name", "child__name")
    )


def _refused(field: str, call: Any) -> str:
    with pytest.raises(InvalidInput) as caught:
        call()
    assert caught.value.field == field
    return caught.value.message


def test_a_job_with_parents_is_dependent_and_never_fires_on_its_own() -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, name="load", cron=HOURLY)
    child = _child(tenant, [root], name="balances", trigger_rule="all_done")

    child.refresh_from_db()
    assert (child.kind, child.next_fire_at, child.cron_expression) == (JobKind.DEPENDENT, None, "")
    assert (child.status, child.trigger_rule) == (JobStatus.ACTIVE, "all_done")
    assert _edges(tenant) == {("load", "balances")}
    # The engine claims only jobs with a next firing; the database keeps dependent jobs out.
    with pytest.raises(IntegrityError, match="job_dependent_has_no_fire"), transaction.atomic():
        Job.objects.filter(id=child.id).update(next_fire_at=T0)


@pytest.mark.parametrize(
    ("schedule", "field"),
    [
        ({"cron": HOURLY}, "schedule"),
        ({"interval": timedelta(seconds=60)}, "interval"),
        ({"run_at": T0 + timedelta(days=1)}, "run_at"),
    ],
)
def test_a_schedule_with_parents_is_refused_naming_its_field(
    schedule: dict[str, Any], field: str
) -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, cron=HOURLY)

    message = _refused(field, lambda: _child(tenant, [root], name="c", **schedule))

    assert "depends_on" in message
    assert not Job.objects.filter(tenant=tenant, name="c").exists()


def test_parents_missing_foreign_cancelled_repeated_or_too_many_are_refused() -> None:
    tenant, other = tenant_factory(), tenant_factory()
    root = job_factory(tenant, cron=HOURLY)
    foreign = job_factory(other, cron=HOURLY)
    gone = job_factory(tenant, cron=HOURLY)
    job_cancel(job_id=gone.id, now=T0)
    missing = uuid.uuid4()

    assert str(missing) in _refused("depends_on", lambda: _child(tenant, [root, Job(id=missing)]))
    # Another tenant's job reads as missing.
    assert "no job" in _refused("depends_on", lambda: _child(tenant, [foreign]))
    assert "cancelled" in _refused("depends_on", lambda: _child(tenant, [root, gone]))
    assert "twice" in _refused("depends_on", lambda: _child(tenant, [root, root]))
    many = [Job(id=uuid.uuid4()) for _ in range(MAX_PARENTS + 1)]
    assert f"at most {MAX_PARENTS}" in _refused("depends_on", lambda: _child(tenant, many))
    assert Job.objects.filter(tenant=tenant, kind=JobKind.DEPENDENT).count() == 0
    assert _edges(tenant) == set()


def test_an_unknown_trigger_rule_is_refused() -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, cron=HOURLY)

    message = _refused("trigger_rule", lambda: _child(tenant, [root], trigger_rule="any_success"))

    assert "all_success, all_done" in message
    assert not Job.objects.filter(tenant=tenant, kind=JobKind.DEPENDENT).exists()


def test_roots_with_different_schedules_are_refused_and_named() -> None:
    tenant = tenant_factory()
    hourly = job_factory(tenant, name="hourly", cron=HOURLY)
    paris = job_factory(tenant, name="paris", cron=HOURLY, timezone="Europe/Paris")
    same = job_factory(tenant, name="same", cron=HOURLY)
    mid = _child(tenant, [hourly], name="mid")

    # Through a dependent parent too: mid's root is hourly.
    message = _refused("depends_on", lambda: _child(tenant, [mid, paris], name="bad"))
    assert "'hourly' (cron '0 * * * *', UTC)" in message
    assert "'paris' (cron '0 * * * *', Europe/Paris)" in message
    assert not Job.objects.filter(name="bad").exists()

    _child(tenant, [mid, same], name="fine")
    assert _edges(tenant) == {("hourly", "mid"), ("mid", "fine"), ("same", "fine")}


def test_interval_roots_agree_only_with_the_same_anchor() -> None:
    tenant = tenant_factory()
    every = timedelta(seconds=60)
    a = job_factory(tenant, name="a", interval=every, anchor_at=T0)
    b = job_factory(tenant, name="b", interval=every, anchor_at=T0)
    shifted = job_factory(
        tenant, name="shifted", interval=every, anchor_at=T0 + timedelta(seconds=5)
    )

    _child(tenant, [a, b], name="ab")
    message = _refused("depends_on", lambda: _child(tenant, [a, shifted]))
    assert "every 60 s from" in message


def _chain(tenant: Tenant) -> tuple[Job, Job, Job, Job]:
    root = job_factory(tenant, name="root", cron=HOURLY)
    a = _child(tenant, [root], name="a")
    b = _child(tenant, [a], name="b")
    c = _child(tenant, [b], name="c")
    return root, a, b, c


def test_a_patch_closing_a_cycle_is_refused_naming_it_and_changes_nothing() -> None:
    tenant = tenant_factory()
    root, a, b, c = _chain(tenant)
    before = _edges(tenant)

    message = _refused(
        "depends_on",
        lambda: job_patch(
            job_id=a.id, changes={"depends_on": [root.id, c.id]}, status=None,
            expected_version=None, now=T0,
        ),
    )  # fmt: skip

    assert message == (
        f"would close a cycle: 'a' ({a.id}) -> 'b' ({b.id}) -> 'c' ({c.id}) -> 'a' ({a.id})"
    )
    assert _edges(tenant) == before
    a.refresh_from_db()
    assert a.version == 1


def test_a_job_cannot_depend_on_itself() -> None:
    tenant = tenant_factory()
    _root, a, _b, _c = _chain(tenant)

    message = _refused(
        "depends_on",
        lambda: job_patch(
            job_id=a.id, changes={"depends_on": [a.id]}, status=None, expected_version=None,
            now=T0,
        ),
    )  # fmt: skip

    assert message == f"would close a cycle: 'a' ({a.id}) -> 'a' ({a.id})"


def test_a_root_schedule_change_follows_its_dag_unless_another_root_disagrees() -> None:
    tenant = tenant_factory()
    root, a, _b, _c = _chain(tenant)
    # The sole root of its DAG may move: its descendants move with it.
    job_patch(
        job_id=root.id, changes={"cron": "30 * * * *"}, status=None, expected_version=None, now=T0
    )
    other = job_factory(tenant, name="other", cron="30 * * * *")
    job_patch(
        job_id=a.id, changes={"depends_on": [root.id, other.id]}, status=None,
        expected_version=None, now=T0,
    )  # fmt: skip

    # Now a's roots are root and other: moving one of them alone is refused.
    message = _refused(
        "schedule",
        lambda: job_patch(
            job_id=root.id, changes={"cron": HOURLY}, status=None, expected_version=None, now=T0
        ),
    )
    assert "'other'" in message
    root.refresh_from_db()
    assert (root.cron_expression, root.version) == ("30 * * * *", 2)


def test_a_job_losing_its_parents_needs_a_schedule_and_its_descendants_must_agree() -> None:
    tenant = tenant_factory()
    _root, a, b, _c = _chain(tenant)

    # Parents removed and no schedule given: the job would have no schedule.
    _refused(
        "schedule",
        lambda: job_patch(
            job_id=b.id, changes={"depends_on": []}, status=None, expected_version=None, now=T0
        ),
    )
    # b becomes a root on another schedule: c's only root is b, so that is fine.
    job_patch(
        job_id=b.id, changes={"depends_on": [], "cron": "5 * * * *"}, status=None,
        expected_version=None, now=T0,
    )  # fmt: skip
    b.refresh_from_db()
    assert b.kind == JobKind.CRON
    assert b.next_fire_at is not None
    assert _edges(tenant) == {("root", "a"), ("b", "c")}
    # c cannot take a as a second parent now: a's root fires at :00, b at :05.
    c = Job.objects.get(tenant=tenant, name="c")
    message = _refused(
        "depends_on",
        lambda: job_patch(
            job_id=c.id, changes={"depends_on": [a.id, b.id]}, status=None,
            expected_version=None, now=T0,
        ),
    )  # fmt: skip
    assert "'b' (cron '5 * * * *', UTC)" in message
    assert "'root'" in message


def test_a_scheduled_job_turned_dependent_stops_firing() -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, name="root", cron=HOURLY)
    solo = job_factory(tenant, name="solo", cron="*/5 * * * *")

    job = job_patch(
        job_id=solo.id, changes={"depends_on": [root.id], "cron": None}, status=None,
        expected_version=None, now=T0,
    )  # fmt: skip

    assert (job.kind, job.next_fire_at, job.cron_expression) == (JobKind.DEPENDENT, None, "")


def test_bulk_create_names_the_item_and_creates_nothing() -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, name="root", cron=HOURLY)
    paris = job_factory(tenant, name="paris", cron=HOURLY, timezone="Europe/Paris")

    def item(name: str, parents: list[Job]) -> JobInput:
        return JobInput(
            name=name, target_kind="callable", target_name="demo.heartbeat",
            depends_on=[parent.id for parent in parents],
        )  # fmt: skip

    _refused(
        "jobs[1].depends_on",
        lambda: job_create_many(
            tenant=tenant, items=[item("x", [root]), item("y", [root, paris])], now=T0
        ),
    )
    assert not Job.objects.filter(tenant=tenant, name__in=["x", "y"]).exists()

    made = job_create_many(tenant=tenant, items=[item("x", [root]), item("y", [paris])], now=T0)
    assert [job.kind for job in made] == [JobKind.DEPENDENT, JobKind.DEPENDENT]
    assert _edges(tenant) == {("root", "x"), ("paris", "y")}


@pytest.fixture
def api(redis_client: object) -> ApiClient:
    return api_client_for(f"dag-{uuid.uuid4().hex[:8]}")


def _definition(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "target": {"kind": "callable", "name": "demo.heartbeat"}, **fields}


def test_api_errors_name_the_request_field(api: ApiClient) -> None:
    root = api.post("/v1/jobs", _definition("root", schedule=HOURLY)).json()["job_id"]
    child = api.post("/v1/jobs", _definition("child", depends_on=[root]))
    assert child.status_code == 201, child.json()
    assert child.json()["kind"] == "dependent"

    both = api.post("/v1/jobs", _definition("x", depends_on=[root], interval_sec=60))
    assert both.status_code == 400
    assert list(both.json()["error"]["fields"]) == ["interval_sec"]

    cycle = api.patch(f"/v1/jobs/{root}", {"depends_on": [child.json()["job_id"]]})
    assert cycle.status_code == 400
    assert list(cycle.json()["error"]["fields"]) == ["depends_on"]
    assert "would close a cycle: 'root'" in cycle.json()["error"]["message"]
    assert api.get(f"/v1/jobs/{root}").json()["kind"] == "cron"
