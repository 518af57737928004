"""Upcoming load: per-minute firings from grouped schedules, on an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from beat_engine.load_forecast import OTHER_TENANTS, ScheduleGroup, forecast_load
from beat_engine.schedules import ScheduleSpec, count_fires, iter_fires
from tests.support.clock import FakeClock

NOON = datetime(2026, 1, 14, 12, 0, tzinfo=UTC)


def _cron(expr: str, count: int, *, tenant: str = "acme", tz: str = "UTC", jitter_s: int = 0):
    return ScheduleGroup(
        spec=ScheduleSpec.from_cron(expr, tz),
        jitter=timedelta(seconds=jitter_s),
        tenant=tenant,
        count=count,
        label=f"{expr} {tz}",
    )


def _index(at: datetime, start: datetime = NOON) -> int:
    return int((at - start) // timedelta(minutes=1))


def test_midnight_herd_lands_in_one_minute() -> None:
    clock = FakeClock(NOON)
    forecast = forecast_load([_cron("0 0 * * *", 1000)], now=clock.now())
    totals = forecast.totals()
    assert len(totals) == 1440
    midnight = _index(datetime(2026, 1, 15, tzinfo=UTC))
    assert totals[midnight] == 1000
    assert sum(totals) == 1000
    assert forecast.peaks[0].start == datetime(2026, 1, 15, tzinfo=UTC)
    assert forecast.peaks[0].unjittered


def test_jitter_spreads_the_herd_over_its_window() -> None:
    forecast = forecast_load([_cron("0 0 * * *", 600, jitter_s=300)], now=NOON)
    totals = forecast.totals()
    midnight = _index(datetime(2026, 1, 15, tzinfo=UTC))
    assert totals[midnight : midnight + 5] == pytest.approx([120.0] * 5)
    assert totals[midnight + 5] == 0
    assert sum(totals) == pytest.approx(600)
    assert not forecast.peaks[0].unjittered


def test_jitter_window_not_aligned_to_minutes_splits_by_overlap() -> None:
    # 90 s of jitter: two thirds of the firings in the first minute, one third in the next.
    forecast = forecast_load([_cron("0 0 * * *", 90, jitter_s=90)], now=NOON)
    midnight = _index(datetime(2026, 1, 15, tzinfo=UTC))
    assert forecast.totals()[midnight : midnight + 2] == pytest.approx([60.0, 30.0])


def test_cron_is_evaluated_in_the_jobs_zone() -> None:
    # Midnight in Paris in January is 23:00 UTC.
    forecast = forecast_load([_cron("0 0 * * *", 7, tz="Europe/Paris")], now=NOON)
    assert forecast.totals()[_index(datetime(2026, 1, 14, 23, tzinfo=UTC))] == 7


def test_one_distinct_schedule_is_evaluated_once_for_every_tenant() -> None:
    groups = [_cron("*/5 * * * *", 10, tenant=f"t{i}") for i in range(50)]
    forecast = forecast_load(groups, now=NOON)
    assert forecast.groups_evaluated == 1
    # 288 firings a day, less the one at noon itself: only firings strictly after now count.
    assert sum(forecast.totals()) == 50 * 10 * 287


def test_top_tenants_then_other() -> None:
    groups = [_cron("0 * * * *", count, tenant=f"t{count}") for count in (1, 2, 3, 40, 50)]
    forecast = forecast_load(groups, now=NOON, top_tenants=2)
    assert list(forecast.series) == ["t50", "t40", OTHER_TENANTS]
    one_oclock = _index(datetime(2026, 1, 14, 13, tzinfo=UTC))
    assert forecast.series[OTHER_TENANTS][one_oclock] == 6
    assert forecast.series["t50"][one_oclock] == 50


def test_short_interval_counts_per_minute_and_skips_the_past_part_of_this_minute() -> None:
    anchor = datetime(2026, 1, 1, tzinfo=UTC)
    spec = ScheduleSpec.every(timedelta(seconds=10), anchor)
    group = ScheduleGroup(spec=spec, jitter=timedelta(0), tenant="a", count=3, label="every 10s")
    now = NOON + timedelta(seconds=25)  # firings at :30, :40, :50 are still to come
    forecast = forecast_load([group], now=now)
    totals = forecast.totals()
    assert totals[0] == 9
    assert totals[1:5] == [18, 18, 18, 18]
    # Exactly what the engine's evaluator counts over the same span.
    end = forecast.start + timedelta(days=1) - timedelta(microseconds=1)
    assert sum(totals) == 3 * count_fires(spec, now, end)


def test_long_interval_follows_its_anchor() -> None:
    anchor = NOON + timedelta(hours=1, seconds=30)  # starts later, then every 2 hours
    spec = ScheduleSpec.every(timedelta(hours=2), anchor)
    group = ScheduleGroup(spec=spec, jitter=timedelta(0), tenant="a", count=2, label="every 2h")
    totals = forecast_load([group], now=NOON).totals()
    hits = [index for index, value in enumerate(totals) if value]
    assert hits == [60 + 120 * k for k in range(12)]
    assert all(totals[index] == 2 for index in hits)


def test_firings_beyond_the_horizon_and_jitter_past_its_end_are_left_out() -> None:
    forecast = forecast_load(
        [_cron("59 11 * * *", 60, jitter_s=120), _cron("0 12 * * *", 5)],
        now=NOON,
        horizon=timedelta(hours=24),
    )
    totals = forecast.totals()
    # 11:59 tomorrow is the last bucket; its second jittered minute falls past the end.
    assert totals[-1] == pytest.approx(30)
    # Today's 12:00 firing is not strictly after now, tomorrow's is past the horizon.
    assert sum(totals) == pytest.approx(30)


def test_one_off_job_and_empty_input() -> None:
    spec = ScheduleSpec.once(NOON + timedelta(minutes=90))
    group = ScheduleGroup(spec=spec, jitter=timedelta(0), tenant="a", count=4, label="once")
    assert forecast_load([group], now=NOON).totals()[90] == 4
    empty = forecast_load([], now=NOON)
    assert empty.totals() == [0.0] * 1440
    assert empty.peaks == []


def test_peaks_name_the_schedules_that_make_them_up() -> None:
    groups = [
        _cron("0 0 * * *", 700, tenant="big"),
        _cron("0 0 * * *", 200, tenant="small"),
        _cron("*/30 * * * *", 3, tenant="small"),
        _cron("15 3 * * *", 50, tenant="big", jitter_s=60),
    ]
    forecast = forecast_load(groups, now=NOON, top_minutes=2, contributors=2)
    top = forecast.peaks[0]
    assert top.start == datetime(2026, 1, 15, tzinfo=UTC)
    assert top.firings == 903
    assert [(part.group.tenant, part.firings) for part in top.contributions] == [
        ("big", 700),
        ("small", 200),
    ]
    assert forecast.peaks[1].start == datetime(2026, 1, 15, 3, 15, tzinfo=UTC)
    assert forecast.peaks[1].firings == 50


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        forecast_load([], now=datetime(2026, 1, 1))  # noqa: DTZ001


@pytest.mark.parametrize(
    "spec",
    [
        ScheduleSpec.from_cron("*/7 3-20 * * 1-5", "America/New_York"),
        ScheduleSpec.from_cron("30 1 * * *", "Europe/London"),
        ScheduleSpec.from_cron("15 2 * * *", "Europe/Paris"),  # a DST-gap instant in spring
        ScheduleSpec.every(timedelta(seconds=90), NOON - timedelta(seconds=7)),
        ScheduleSpec.every(timedelta(seconds=13), NOON + timedelta(hours=5, seconds=3)),
        ScheduleSpec.every(timedelta(hours=5), NOON + timedelta(minutes=1)),
    ],
)
@pytest.mark.parametrize(
    "now", [NOON + timedelta(seconds=41), datetime(2026, 3, 28, 22, tzinfo=UTC)]
)
def test_buckets_match_the_engines_own_firings_listed_one_by_one(
    spec: ScheduleSpec, now: datetime
) -> None:
    group = ScheduleGroup(spec=spec, jitter=timedelta(0), tenant="a", count=1, label="x")
    forecast = forecast_load([group], now=now)
    expected = [0.0] * forecast.minutes
    end = forecast.start + timedelta(days=1)
    for fire in iter_fires(spec, now, until=end - timedelta(microseconds=1)):
        expected[int((fire - forecast.start) // timedelta(minutes=1))] += 1
    assert forecast.totals() == expected
