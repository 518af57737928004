"""Catch-up planning after an outage: what runs, what is recorded as missed, what comes next."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beat_engine.catchup import CatchUpPlan, CatchUpPolicy, plan_catch_up
from beat_engine.schedules import ScheduleSpec, count_fires

MINUTELY = ScheduleSpec.from_cron("* * * * *")
HOURLY = ScheduleSpec.from_cron("0 * * * *")


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def minutes(start: datetime, count: int) -> tuple[datetime, ...]:
    return tuple(start + timedelta(minutes=index) for index in range(count))


def test_on_time_firing_runs_normally() -> None:
    plan = plan_catch_up(
        HOURLY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 9, 0, 1),
        policy=CatchUpPolicy.SKIP,
        starting_deadline=timedelta(minutes=5),
    )
    assert plan == CatchUpPlan(
        run=(at(2026, 1, 1, 9),), missed=(), missed_count=0, next_fire_at=at(2026, 1, 1, 10)
    )


def test_nothing_is_due_before_first_due() -> None:
    plan = plan_catch_up(
        HOURLY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 8),
        policy=CatchUpPolicy.REPLAY_ALL,
        starting_deadline=None,
    )
    assert plan == CatchUpPlan(run=(), missed=(), missed_count=0, next_fire_at=at(2026, 1, 1, 9))


def test_skip_runs_only_latest() -> None:
    plan = plan_catch_up(
        HOURLY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 13, 30),
        policy=CatchUpPolicy.SKIP,
        starting_deadline=None,
    )
    assert plan.run == (at(2026, 1, 1, 13),)
    assert plan.missed == (
        at(2026, 1, 1, 9),
        at(2026, 1, 1, 10),
        at(2026, 1, 1, 11),
        at(2026, 1, 1, 12),
    )
    assert plan.missed_count == 4
    assert plan.next_fire_at == at(2026, 1, 1, 14)


def test_skip_runs_nothing_when_latest_is_past_its_starting_deadline() -> None:
    plan = plan_catch_up(
        HOURLY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 10, 30),
        policy=CatchUpPolicy.SKIP,
        starting_deadline=timedelta(minutes=10),
    )
    assert plan.run == ()
    assert plan.missed == (at(2026, 1, 1, 9), at(2026, 1, 1, 10))
    assert plan.missed_count == 2


def test_run_once_runs_latest_even_past_its_starting_deadline() -> None:
    plan = plan_catch_up(
        HOURLY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 10, 30),
        policy=CatchUpPolicy.RUN_ONCE,
        starting_deadline=timedelta(minutes=10),
    )
    assert plan.run == (at(2026, 1, 1, 10),)
    assert plan.missed == (at(2026, 1, 1, 9),)
    assert plan.missed_count == 1


def test_replay_all_is_capped_at_limit() -> None:
    plan = plan_catch_up(
        MINUTELY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 12),
        policy=CatchUpPolicy.REPLAY_ALL,
        starting_deadline=None,
    )
    # 181 due (09:00 through 12:00): the newest 100 run in order, the oldest 81 are missed.
    assert plan.run == minutes(at(2026, 1, 1, 10, 21), 100)
    assert plan.missed == minutes(at(2026, 1, 1, 9), 81)
    assert plan.missed_count == 81


def test_replay_all_runs_every_missed_firing_within_limit() -> None:
    plan = plan_catch_up(
        HOURLY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 12),
        policy=CatchUpPolicy.REPLAY_ALL,
        starting_deadline=None,
        limit=10,
    )
    assert plan.run == (
        at(2026, 1, 1, 9),
        at(2026, 1, 1, 10),
        at(2026, 1, 1, 11),
        at(2026, 1, 1, 12),
    )
    assert (plan.missed, plan.missed_count) == ((), 0)


def test_starting_deadline_marks_old_ones_missed() -> None:
    spec = ScheduleSpec.from_cron("*/10 * * * *")
    plan = plan_catch_up(
        spec,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 10, 5),
        policy=CatchUpPolicy.REPLAY_ALL,
        starting_deadline=timedelta(minutes=25),
    )
    # On time means scheduled at or after 09:40.
    assert plan.run == (at(2026, 1, 1, 9, 40), at(2026, 1, 1, 9, 50), at(2026, 1, 1, 10))
    assert plan.missed == tuple(at(2026, 1, 1, 9, minute) for minute in (0, 10, 20, 30))
    assert plan.missed_count == 4


def test_firing_exactly_at_its_deadline_is_still_on_time() -> None:
    plan = plan_catch_up(
        HOURLY,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 1, 9, 5),
        policy=CatchUpPolicy.SKIP,
        starting_deadline=timedelta(minutes=5),
    )
    assert plan.run == (at(2026, 1, 1, 9),)


def test_missed_records_are_capped_but_all_are_counted() -> None:
    plan = plan_catch_up(
        MINUTELY,
        first_due=at(2026, 1, 1),
        now=at(2026, 1, 2),
        policy=CatchUpPolicy.SKIP,
        starting_deadline=None,
        missed_record_limit=5,
    )
    assert plan.run == (at(2026, 1, 2),)
    assert plan.missed == minutes(at(2026, 1, 1, 23, 55), 5)
    assert plan.missed_count == 1440


def test_millions_of_missed_interval_firings_computed_quickly() -> None:
    spec = ScheduleSpec.every(timedelta(seconds=1), at(2026, 1, 1))
    started = time.perf_counter()
    plan = plan_catch_up(
        spec,
        first_due=at(2026, 1, 1),
        now=at(2026, 1, 31),
        policy=CatchUpPolicy.REPLAY_ALL,
        starting_deadline=timedelta(hours=1),
    )
    elapsed = time.perf_counter() - started
    due = 30 * 86400 + 1  # 2,592,001 firings, from first_due through now inclusive
    last_run = at(2026, 1, 30, 23, 58, 21)
    assert plan.run == tuple(last_run + timedelta(seconds=i) for i in range(100))
    assert plan.missed_count == due - 100
    assert len(plan.missed) == 1000
    assert plan.missed[-1] == at(2026, 1, 30, 23, 58, 20)
    assert plan.next_fire_at == at(2026, 1, 31, 0, 0, 1)
    assert elapsed < 0.5


def test_interval_deadline_counts_on_time_firings_arithmetically() -> None:
    spec = ScheduleSpec.every(timedelta(seconds=1), at(2026, 1, 1))
    plan = plan_catch_up(
        spec,
        first_due=at(2026, 1, 1),
        now=at(2026, 1, 31),
        policy=CatchUpPolicy.REPLAY_ALL,
        starting_deadline=timedelta(seconds=30),
    )
    assert plan.run[0] == at(2026, 1, 30, 23, 59, 30)
    assert len(plan.run) == 31
    assert plan.missed_count == 30 * 86400 + 1 - 31


def test_year_of_missed_minutely_cron_is_counted_exactly_and_quickly() -> None:
    spec = ScheduleSpec.from_cron("* * * * *", "Europe/Paris")
    started = time.perf_counter()
    plan = plan_catch_up(
        spec,
        first_due=at(2025, 1, 1),
        now=at(2026, 1, 1),
        policy=CatchUpPolicy.RUN_ONCE,
        starting_deadline=None,
    )
    assert time.perf_counter() - started < 0.5
    # Elapsed-time job: the fold and the gap cancel out, one firing per real minute.
    assert plan.missed_count == 365 * 1440
    assert plan.run == (at(2026, 1, 1),)


def test_missed_once_job_past_deadline_is_recorded() -> None:
    spec = ScheduleSpec.once(at(2026, 1, 1, 9))
    plan = plan_catch_up(
        spec,
        first_due=at(2026, 1, 1, 9),
        now=at(2026, 1, 2),
        policy=CatchUpPolicy.SKIP,
        starting_deadline=timedelta(hours=1),
    )
    assert plan == CatchUpPlan(
        run=(), missed=(at(2026, 1, 1, 9),), missed_count=1, next_fire_at=None
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"first_due": datetime(2026, 1, 1)}, "timezone-aware"),  # noqa: DTZ001
        ({"starting_deadline": timedelta(seconds=-1)}, "must not be negative"),
        ({"limit": 0}, "limit must be at least 1"),
        ({"missed_record_limit": -1}, "must not be negative"),
    ],
)
def test_bad_arguments_are_refused(arguments: dict[str, object], message: str) -> None:
    call: dict[str, object] = {
        "first_due": at(2026, 1, 1),
        "now": at(2026, 1, 2),
        "policy": CatchUpPolicy.SKIP,
        "starting_deadline": None,
    } | arguments
    with pytest.raises(ValueError, match=message):
        plan_catch_up(HOURLY, **call)  # type: ignore[arg-type]


@given(
    policy=st.sampled_from(list(CatchUpPolicy)),
    expr=st.sampled_from(["* * * * *", "*/7 * * * *", "0 * * * *", "30 9 * * 1-5"]),
    outage=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=20)),
    deadline=st.none() | st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2)),
    limit=st.integers(min_value=1, max_value=150),
    record=st.integers(min_value=0, max_value=50),
)
@settings(max_examples=150, deadline=None, database=None)
def test_plan_accounts_for_every_due_firing(
    policy: CatchUpPolicy,
    expr: str,
    outage: timedelta,
    deadline: timedelta | None,
    limit: int,
    record: int,
) -> None:
    spec = ScheduleSpec.from_cron(expr, "America/New_York")
    first_due = at(2026, 3, 1, 14, 30)  # a firing of every expression above
    now = first_due + outage
    plan = plan_catch_up(
        spec,
        first_due=first_due,
        now=now,
        policy=policy,
        starting_deadline=deadline,
        limit=limit,
        missed_record_limit=record,
    )
    due = 1 + count_fires(spec, first_due, now)
    assert len(plan.run) + plan.missed_count == due
    assert len(plan.run) <= (limit if policy is CatchUpPolicy.REPLAY_ALL else 1)
    assert len(plan.missed) == min(record, plan.missed_count)
    listed = plan.missed + plan.run
    assert list(listed) == sorted(set(listed))
    assert all(first_due <= moment <= now for moment in listed)
    if deadline is not None and policy is not CatchUpPolicy.RUN_ONCE:
        assert all(now - moment <= deadline for moment in plan.run)
    assert plan.next_fire_at is not None
    assert plan.next_fire_at > now
