"""@scheduled declarations and registrations (no database)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from jobs.decorators import DeclaredSchedules, ScheduleDeclaration, declared_schedules, scheduled
from jobs.models import JobSource, TargetKind
from jobs.registry import registry


def test_scheduled_function_is_registered_and_declared() -> None:
    @scheduled(
        cron="0 9 * * *", tz="Europe/Paris", critical=True, name="unit.daily_report", max_attempts=5
    )
    def daily_report(context: Any) -> None:
        return None

    entry = registry.get("unit.daily_report")
    assert entry is not None
    assert entry.func is daily_report
    declaration = declared_schedules.by_name["unit.daily_report"]
    data = declaration.job_input()
    assert (data.cron, data.timezone, data.critical, data.max_attempts) == (
        "0 9 * * *",
        "Europe/Paris",
        True,
        5,
    )
    assert data.target_kind == TargetKind.CALLABLE
    assert data.source == JobSource.DECORATOR


def test_scheduled_celery_task_targets_the_task_by_name() -> None:
    from scheduler_project.celery import app

    @scheduled(interval=300, name="unit.sync_task")
    @app.task(name="unit.sync_task_impl")
    def sync_task(payload: Any, scheduler_context: dict[str, Any]) -> None:
        return None

    declaration = declared_schedules.by_name["unit.sync_task"]
    assert declaration.target_kind == TargetKind.TASK
    assert declaration.target_name == "unit.sync_task_impl"
    assert declaration.interval == timedelta(minutes=5)
    assert registry.get("unit.sync_task") is None


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"cron": "* * * * *", "interval": 60}, {"cron": "* * * * *", "not_an_option": 1}],
)
def test_scheduled_rejects_bad_declarations(kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        scheduled(**kwargs)


def test_the_same_name_declared_twice_differently_is_refused() -> None:
    schedules = DeclaredSchedules()
    first = ScheduleDeclaration("n", "callable", "n", "* * * * *", None, "UTC", False)
    schedules.add(first)
    schedules.add(first)
    with pytest.raises(ValueError, match="declared twice"):
        schedules.add(ScheduleDeclaration("n", "callable", "n", "0 * * * *", None, "UTC", False))


def test_after_declares_parents_by_name_or_by_the_decorated_object(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A fresh set of declarations, so these do not outlive the test.
    monkeypatch.setattr(declared_schedules, "by_name", {})

    @scheduled(cron="0 2 * * *", name="dagtest.load")
    def load(context: Any) -> None:
        return None

    @scheduled(after=[load, "dagtest.other", "dagtest.other"], name="dagtest.report",
               trigger_rule="all_done")  # fmt: skip
    def report(context: Any) -> None:
        return None

    declaration = declared_schedules.by_name["dagtest.report"]
    assert declaration.after == ("dagtest.load", "dagtest.other")
    assert (declaration.cron, declaration.interval) == (None, None)
    data = declaration.job_input()
    assert data.trigger_rule == "all_done"
    assert data.depends_on is None  # resolved to ids by sync_schedules
    assert declared_schedules.by_name["dagtest.load"].after == ()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"after": ["x"], "cron": "* * * * *"},
        {"after": ["x"], "interval": 60},
        {"after": []},
        {"after": "x"},
        {"after": [object()]},
        {"after": ["x"], "depends_on": []},
    ],
)
def test_after_is_refused_with_a_schedule_or_without_parents(kwargs: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        scheduled(**kwargs)
