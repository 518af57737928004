"""Two concurrent PATCHes that would together close a cycle: the tenant's DAG lock serialises
them, so exactly one wins and the graph stays acyclic. Real threads, one connection each."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

from jobs.errors import HasDependents, InvalidInput
from jobs.models import Job, JobDependency, JobStatus
from jobs.services.job_intake import job_patch
from jobs.services.jobs import JobInput, job_cancel, job_create
from tests.support.factories import T0, job_factory, tenant_factory
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _dependent(tenant: Any, name: str, parents: list[Job]) -> Job:
    data = JobInput(
        name=name, target_kind="callable", target_name="demo.heartbeat",
        depends_on=[parent.id for parent in parents],
    )  # fmt: skip
    return job_create(tenant=tenant, data=data, now=T0)


def _waiting_for_advisory_lock() -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
        row = cursor.fetchone()
    return bool(row and row[0])


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        try:
            target()
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _waited_for_lock() -> bool:
    try:
        wait_until(_waiting_for_advisory_lock, timeout_s=5, what="the second change to wait")
    except AssertionError:
        return False
    return True


def test_two_patches_closing_a_cycle_together_cannot_both_succeed() -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, name="root", cron="0 * * * *")
    x = _dependent(tenant, "x", [root])
    y = _dependent(tenant, "y", [root])
    first_wrote, release_first = threading.Event(), threading.Event()
    outcomes: dict[str, str] = {}

    def patch(job: Job, parent: Job) -> None:
        try:
            job_patch(
                job_id=job.id, changes={"depends_on": [root.id, parent.id]}, status=None,
                expected_version=None, now=T0,
            )  # fmt: skip
            outcomes[job.name] = "ok"
        except InvalidInput as exc:
            outcomes[job.name] = exc.message

    def first() -> None:
        # x after y, written and held uncommitted while y's PATCH starts.
        with transaction.atomic():
            patch(x, y)
            first_wrote.set()
            release_first.wait(10)

    one = _in_thread(first)
    assert first_wrote.wait(10)
    two = _in_thread(lambda: patch(y, x))
    # The second PATCH waits on the DAG lock; without it, it would finish on a graph that
    # does not show the first one's edge yet, and both would commit.
    waited = _waited_for_lock()
    release_first.set()
    one.join(10)
    two.join(10)

    assert outcomes["x"] == "ok"
    assert outcomes["y"].startswith("would close a cycle: 'y'")
    edges = set(JobDependency.objects.values_list("parent__name", "child__name"))
    assert edges == {("root", "x"), ("root", "y"), ("y", "x")}
    assert waited


def test_a_parent_cancelled_while_a_child_is_created_is_not_left_with_a_live_child() -> None:
    tenant = tenant_factory()
    root = job_factory(tenant, name="root", cron="0 * * * *")
    created, release = threading.Event(), threading.Event()
    outcome: dict[str, str] = {}

    def create_child() -> None:
        with transaction.atomic():
            _dependent(tenant, "child", [root])
            created.set()
            release.wait(10)

    def cancel_root() -> None:
        try:
            job_cancel(job_id=root.id, now=T0)
            outcome["cancel"] = "ok"
        except HasDependents as exc:
            outcome["cancel"] = str(exc)

    one = _in_thread(create_child)
    assert created.wait(10)
    two = _in_thread(cancel_root)
    waited = _waited_for_lock()
    release.set()
    one.join(10)
    two.join(10)

    assert outcome["cancel"].startswith("the job has live dependents: 'child'")
    assert Job.objects.get(id=root.id).status == JobStatus.ACTIVE
    assert waited
