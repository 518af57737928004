"""The "why didn't it fire?" decision on facts alone, with an injected clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from beat_engine.schedules import ScheduleSpec
from jobs.explain_rules import (
    EventFact,
    Facts,
    ReasonFact,
    RunFact,
    Verdict,
    explain,
    previous_fire_before,
)
from tests.support.clock import FakeClock

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
MINUTELY = ScheduleSpec.from_cron("* * * * *")
CREATED = T0 - timedelta(days=1)


def _facts(at: datetime, **overrides: object) -> Facts:
    base = Facts(
        at=at,
        spec=MINUTELY,
        job_status="active",
        job_created_at=CREATED,
        job_next_fire_at=T0 + timedelta(hours=1),
    )
    return replace(base, **overrides)  # type: ignore[arg-type]


def _run(at: datetime, state: str = "succeeded", lateness: float | None = 0.2) -> RunFact:
    return RunFact(
        id="r1", state=state, trigger="schedule", scheduled_for=at, attempt=1,
        lateness=None if lateness is None else timedelta(seconds=lateness), start_lag=None,
        published_at=None, started_at=None, finished_at=None, last_error="",
    )  # fmt: skip


def _reason(kind: str, first: datetime, last: datetime, count: int) -> ReasonFact:
    return ReasonFact(kind, first, last, count, first + timedelta(hours=2), T0, "policy skip")


clock = FakeClock(T0 + timedelta(hours=2))


def test_a_run_on_time_is_fired_with_its_state_and_lateness() -> None:
    result = explain(_facts(T0, run=_run(T0)), now=clock.now())
    assert result.verdict == Verdict.FIRED
    assert "run r1 (succeeded, lateness 0.200 s)" in result.reason
    assert result.run_id == "r1"
    assert result.is_firing


def test_a_run_published_on_time_and_started_late_says_the_workers_were_busy() -> None:
    run = replace(_run(T0), start_lag=timedelta(seconds=12))
    result = explain(_facts(T0, run=run), now=clock.now())
    assert result.verdict == Verdict.FIRED
    assert "started 12.000 s after it was due" in result.reason
    assert result.evidence["start_lag_s"] == 12.0


def test_a_run_published_past_the_threshold_is_engine_late() -> None:
    result = explain(_facts(T0, run=_run(T0, lateness=4.5)), now=clock.now())
    assert result.verdict == Verdict.ENGINE_LATE
    assert result.evidence["lateness_s"] == 4.5


def test_a_late_run_held_back_by_its_tenant_limit_is_explained_by_the_limit() -> None:
    deferred = _reason("deferred_tenant_limit", T0, T0, 7)
    facts = _facts(T0, run=_run(T0, lateness=7.1), reasons=(deferred,))
    result = explain(facts, now=clock.now())
    assert result.verdict == Verdict.DEFERRED_TENANT_LIMIT
    assert "held back 7 times" in result.reason


def test_a_skipped_run_gives_the_concurrency_policy_and_its_error() -> None:
    run = replace(_run(T0, "skipped", None), last_error="skipped: run r0 still running")
    result = explain(_facts(T0, run=run), now=clock.now())
    assert result.verdict == Verdict.SKIPPED_CONCURRENCY
    assert "r0 still running" in result.reason


def test_a_firing_inside_a_recorded_catch_up_range_is_missed_with_the_count() -> None:
    at = T0 - timedelta(minutes=30)
    missed = _reason("missed_catch_up", T0 - timedelta(hours=1), T0 - timedelta(minutes=1), 60)
    result = explain(_facts(at, reasons=(missed,)), now=clock.now())
    assert result.verdict == Verdict.MISSED_CATCH_UP
    assert "60 firings from" in result.reason
    assert result.evidence["recorded"]["count"] == 60


def test_a_firing_outside_the_recorded_range_is_not_explained_by_it() -> None:
    at = T0 - timedelta(hours=3)
    missed = _reason("missed_catch_up", T0 - timedelta(hours=1), T0 - timedelta(minutes=1), 60)
    result = explain(_facts(at, reasons=(missed,)), now=clock.now())
    assert result.verdict == Verdict.NO_RECORD


def test_paused_before_the_instant_wins_over_the_catch_up_that_recorded_it() -> None:
    at = T0 + timedelta(minutes=5)
    facts = _facts(
        at,
        run=_run(at, "missed", None),
        event_before=EventFact("paused", T0),
        event_after=EventFact("resumed", T0 + timedelta(minutes=20)),
    )
    result = explain(facts, now=clock.now())
    assert result.verdict == Verdict.PAUSED
    assert "paused at" in result.reason


def test_paused_without_a_run() -> None:
    at = T0 + timedelta(minutes=5)
    result = explain(_facts(at, event_before=EventFact("paused", T0)), now=clock.now())
    assert result.verdict == Verdict.PAUSED


def test_resumed_before_the_instant_is_not_paused() -> None:
    at = T0 + timedelta(minutes=5)
    facts = _facts(at, event_before=EventFact("resumed", T0), job_next_fire_at=at)
    result = explain(facts, now=clock.now())
    assert result.verdict == Verdict.ENGINE_LATE  # due, active, and not claimed


def test_an_instant_the_schedule_does_not_fire_at_is_never_due_with_the_nearest_firings() -> None:
    spec = ScheduleSpec.from_cron("0 9 * * 1-5", "Europe/Paris")
    at = datetime(2026, 3, 7, 8, 0, tzinfo=UTC)  # a Saturday
    result = explain(_facts(at, spec=spec), now=clock.now())
    assert result.verdict == Verdict.NEVER_DUE
    assert result.previous_firing == datetime(2026, 3, 6, 8, 0, tzinfo=UTC)
    assert result.next_firing == datetime(2026, 3, 9, 8, 0, tzinfo=UTC)
    assert "2026-03-06T09:00:00+01:00" in result.reason
    assert not result.is_firing


def test_a_firing_before_the_job_existed_is_inactive() -> None:
    result = explain(_facts(CREATED - timedelta(minutes=1)), now=clock.now())
    assert result.verdict == Verdict.INACTIVE


def test_a_future_firing_is_not_yet_due() -> None:
    at = clock.now() + timedelta(minutes=1)
    assert explain(_facts(at), now=clock.now()).verdict == Verdict.NOT_YET_DUE
    paused = explain(_facts(at, job_status="paused"), now=clock.now())
    assert paused.verdict == Verdict.PAUSED


def test_cancelled_before_the_instant_is_inactive() -> None:
    at = T0 + timedelta(minutes=5)
    result = explain(_facts(at, event_before=EventFact("cancelled", T0)), now=clock.now())
    assert result.verdict == Verdict.INACTIVE


def test_previous_firing_of_a_leap_day_cron_looks_back_years() -> None:
    spec = ScheduleSpec.from_cron("0 0 29 2 *")
    assert previous_fire_before(spec, T0) == datetime(2024, 2, 29, tzinfo=UTC)


def test_interval_and_once_schedules() -> None:
    every = ScheduleSpec.every(timedelta(seconds=90), T0)
    at = T0 + timedelta(seconds=180)
    result = explain(_facts(at, spec=every, run=_run(at)), now=clock.now())
    assert result.previous_firing == T0 + timedelta(seconds=90)
    assert result.is_firing
    once = ScheduleSpec.once(T0)
    off = explain(_facts(T0 + timedelta(seconds=1), spec=once), now=clock.now())
    assert off.verdict == Verdict.NEVER_DUE
    assert off.previous_firing == T0
    assert off.next_firing is None
