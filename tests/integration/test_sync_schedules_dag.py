"""@scheduled(after=[...]) through sync_schedules: jobs first, then edges, in any order."""

from __future__ import annotations

from datetime import UTC, datetime
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from jobs.decorators import ScheduleDeclaration, declared_schedules
from jobs.models import Job, JobDependency, JobKind
from jobs.services.schedules_sync import schedules_sync
from tests.support.factories import job_factory, tenant_factory

pytestmark = [pytest.mark.integration, pytest.mark.django_db]

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _root(name: str, cron: str = "0 2 * * *") -> ScheduleDeclaration:
    return ScheduleDeclaration(name, "callable", "demo.heartbeat", cron, None, "UTC", False)


def _after(name: str, *parents: str, **options: Any) -> ScheduleDeclaration:
    return ScheduleDeclaration(
        name, "callable", "demo.heartbeat", None, None, "UTC", False, options, after=parents
    )


def _edges() -> set[tuple[str, str]]:
    return set(JobDependency.objects.values_list("parent__name", "child__name"))


def _state() -> tuple[list[tuple[Any, ...]], set[tuple[str, str]]]:
    jobs = list(Job.objects.order_by("name").values_list("name", "kind", "status", "version"))
    return jobs, _edges()


def test_children_declared_before_their_parents_get_their_edges() -> None:
    # Listed children first, and a fan-in on a parent declared last.
    declarations = [
        _after("statements", "balances", "fees", trigger_rule="all_done"),
        _after("balances", "ledger"),
        _after("fees", "ledger"),
        _root("ledger"),
    ]

    report = schedules_sync(tenant_name="team-dag", declarations=declarations, now=NOW)

    assert sorted(report.created) == ["balances", "fees", "ledger", "statements"]
    assert _edges() == {
        ("ledger", "balances"),
        ("ledger", "fees"),
        ("balances", "statements"),
        ("fees", "statements"),
    }
    statements = Job.objects.get(name="statements")
    assert statements.kind == JobKind.DEPENDENT
    assert statements.trigger_rule == "all_done"
    assert statements.next_fire_at is None

    before = _state()
    again = schedules_sync(tenant_name="team-dag", declarations=declarations[::-1], now=NOW)
    assert sorted(again.unchanged) == ["balances", "fees", "ledger", "statements"]
    assert _state() == before


def test_changed_parents_replace_the_edges_and_a_root_can_become_a_child() -> None:
    schedules_sync(tenant_name="team-dag",
                   declarations=[_root("a"), _root("b"), _after("c", "a")], now=NOW)  # fmt: skip

    report = schedules_sync(
        tenant_name="team-dag", declarations=[_root("a"), _after("b", "a"), _after("c", "b")],
        now=NOW,
    )  # fmt: skip

    assert sorted(report.updated) == ["b", "c"]
    assert _edges() == {("a", "b"), ("b", "c")}
    assert Job.objects.get(name="b").kind == JobKind.DEPENDENT


def test_a_parent_may_be_a_job_created_through_the_api() -> None:
    tenant = tenant_factory("team-dag", now=NOW)
    job_factory(tenant, name="api-loader", cron="0 2 * * *", now=NOW)

    schedules_sync(tenant_name="team-dag", declarations=[_after("report", "api-loader")], now=NOW)

    assert _edges() == {("api-loader", "report")}


def test_a_cycle_among_declarations_fails_the_command_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedules_sync(tenant_name="team-dag", declarations=[_root("a"), _after("b", "a")], now=NOW)
    before = _state()
    cyclic = {d.name: d for d in [_after("a", "c"), _after("b", "a"), _after("c", "b"),
                                  _root("d")]}  # fmt: skip
    monkeypatch.setattr(declared_schedules, "by_name", cyclic)

    with pytest.raises(CommandError, match=r"cycle \(parent -> child\): a -> b -> c -> a"):
        call_command("sync_schedules", "--tenant", "team-dag", stdout=StringIO(),
                     stderr=StringIO())  # fmt: skip

    assert _state() == before


def test_a_cycle_through_an_api_job_is_refused_by_the_dependency_service(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    schedules_sync(tenant_name="team-dag", declarations=[_root("a")], now=NOW)
    tenant = Job.objects.get(name="a").tenant
    api_job = job_factory(tenant, name="api-child", depends_on=[Job.objects.get(name="a").id],
                          cron=None, now=NOW)  # fmt: skip
    before = _state()
    monkeypatch.setattr(declared_schedules, "by_name", {"a": _after("a", api_job.name)})

    with pytest.raises(CommandError, match="cycle"):
        call_command("sync_schedules", "--tenant", "team-dag", stdout=StringIO(),
                     stderr=StringIO())  # fmt: skip

    assert _state() == before


def test_an_unknown_parent_name_fails_the_command_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(declared_schedules, "by_name",
                        {"a": _root("a"), "b": _after("b", "nowhere")})  # fmt: skip

    with pytest.raises(CommandError, match="'nowhere'"):
        call_command("sync_schedules", "--tenant", "team-dag", stdout=StringIO(),
                     stderr=StringIO())  # fmt: skip

    assert not Job.objects.exists()


def test_roots_on_different_schedules_fail_the_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    declarations = [_root("a", "0 2 * * *"), _root("b", "0 3 * * *"), _after("c", "a", "b")]

    with pytest.raises(Exception, match="same schedule"):
        schedules_sync(tenant_name="team-dag", declarations=declarations, now=NOW)

    assert not Job.objects.exists()
