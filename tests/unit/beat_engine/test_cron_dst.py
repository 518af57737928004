"""Cron in the job's own time zone across daylight-saving changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beat_engine.schedules import (
    CronExpression,
    ScheduleSpec,
    next_fire_after,
    parse_cron,
    preview_fires,
)


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


# (case id, expression, zone, after, the next firings in UTC)
DST_CASES = [
    # Europe/Paris: 02:00 -> 03:00 on 2026-03-29, 03:00 -> 02:00 on 2026-10-25.
    ("paris gap specific hour runs at 03:00", "30 2 * * *", "Europe/Paris", at(2026, 3, 28, 12),
     [at(2026, 3, 29, 1), at(2026, 3, 30, 0, 30)]),
    ("paris fold specific hour runs at first 02:30", "30 2 * * *", "Europe/Paris",
     at(2026, 10, 24, 12), [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]),
    ("paris gap wildcard skips 02:xx without shifting", "*/15 * * * *", "Europe/Paris",
     at(2026, 3, 29, 0, 40), [at(2026, 3, 29, 0, 45), at(2026, 3, 29, 1), at(2026, 3, 29, 1, 15)]),
    ("paris gap firings of one job collapse to one", "*/15 2 * * *", "Europe/Paris",
     at(2026, 3, 28, 12), [at(2026, 3, 29, 1), at(2026, 3, 30, 0), at(2026, 3, 30, 0, 15)]),
    ("paris gap firing and 03:00 firing are one", "0,30 2,3 * * *", "Europe/Paris",
     at(2026, 3, 29), [at(2026, 3, 29, 1), at(2026, 3, 29, 1, 30), at(2026, 3, 30, 0)]),
    # America/New_York: 02:00 -> 03:00 on 2026-03-08, 02:00 -> 01:00 on 2026-11-01.
    ("new york gap specific hour runs at 03:00 EDT", "30 2 * * *", "America/New_York",
     at(2026, 3, 7, 12), [at(2026, 3, 8, 7), at(2026, 3, 9, 6, 30)]),
    ("new york fold specific hour runs once at 01:30 EDT", "30 1 * * *", "America/New_York",
     at(2026, 10, 31, 12), [at(2026, 11, 1, 5, 30), at(2026, 11, 2, 6, 30)]),
    ("new york fold half-hourly runs in both folds", "*/30 * * * *", "America/New_York",
     at(2026, 11, 1, 4, 45),
     [at(2026, 11, 1, 5), at(2026, 11, 1, 5, 30), at(2026, 11, 1, 6), at(2026, 11, 1, 6, 30),
      at(2026, 11, 1, 7)]),
    ("new york fold hourly runs twice at 01:00", "0 * * * *", "America/New_York",
     at(2026, 11, 1, 4, 30), [at(2026, 11, 1, 5), at(2026, 11, 1, 6), at(2026, 11, 1, 7)]),
    ("new york hour step follows elapsed time in fold", "0 */2 * * *", "America/New_York",
     at(2026, 11, 1, 3, 30), [at(2026, 11, 1, 4), at(2026, 11, 1, 7)]),
    ("new york hour step has no 02:00 in gap", "0 */2 * * *", "America/New_York",
     at(2026, 3, 8, 4, 30), [at(2026, 3, 8, 5), at(2026, 3, 8, 8)]),
    # Australia/Lord_Howe: 30-minute shifts, 02:00 -> 02:30 on 2026-10-04, 02:00 -> 01:30 on
    # 2026-04-05 (local dates).
    ("lord howe gap specific hour runs at 02:30", "0 2 * * *", "Australia/Lord_Howe",
     at(2026, 10, 3), [at(2026, 10, 3, 15, 30), at(2026, 10, 4, 15)]),
    ("lord howe gap wildcard skips 02:00", "*/30 * * * *", "Australia/Lord_Howe",
     at(2026, 10, 3, 14, 40), [at(2026, 10, 3, 15), at(2026, 10, 3, 15, 30), at(2026, 10, 3, 16)]),
    ("lord howe fold specific hour runs at first 01:45", "45 1 * * *", "Australia/Lord_Howe",
     at(2026, 4, 4), [at(2026, 4, 4, 14, 45), at(2026, 4, 5, 15, 15)]),
    ("lord howe fold wildcard repeats 01:30", "*/30 * * * *", "Australia/Lord_Howe",
     at(2026, 4, 4, 13, 50),
     [at(2026, 4, 4, 14), at(2026, 4, 4, 14, 30), at(2026, 4, 4, 15), at(2026, 4, 4, 15, 30)]),
    # Europe/Dublin: negative DST in the tz database (IST is standard, GMT the "DST").
    ("dublin gap specific hour runs at 02:00", "30 1 * * *", "Europe/Dublin",
     at(2026, 3, 28, 12), [at(2026, 3, 29, 1), at(2026, 3, 30, 0, 30)]),
    ("dublin fold specific hour runs at first 01:30", "30 1 * * *", "Europe/Dublin",
     at(2026, 10, 24, 12), [at(2026, 10, 25, 0, 30), at(2026, 10, 26, 1, 30)]),
    ("dublin fold hourly runs twice at 01:00", "0 * * * *", "Europe/Dublin",
     at(2026, 10, 24, 23, 30), [at(2026, 10, 25, 0), at(2026, 10, 25, 1), at(2026, 10, 25, 2)]),
    # America/Santiago: transitions at midnight (00:00 -> 01:00; 24:00 -> 23:00 the day before).
    ("santiago midnight gap runs at 01:00", "30 0 * * *", "America/Santiago",
     at(2026, 9, 5), [at(2026, 9, 5, 4, 30), at(2026, 9, 6, 4), at(2026, 9, 7, 3, 30)]),
    ("santiago fold at 23:xx runs once", "30 23 * * *", "America/Santiago",
     at(2026, 4, 4, 12), [at(2026, 4, 5, 2, 30), at(2026, 4, 6, 3, 30)]),
    ("santiago fold hourly repeats 23:30", "30 * * * *", "America/Santiago",
     at(2026, 4, 5, 1),
     [at(2026, 4, 5, 1, 30), at(2026, 4, 5, 2, 30), at(2026, 4, 5, 3, 30), at(2026, 4, 5, 4, 30)]),
    # America/Havana: 00:00 -> 01:00 on 2026-03-08, 01:00 -> 00:00 on 2026-11-01.
    ("havana midnight gap runs at 01:00", "0 0 * * *", "America/Havana", at(2026, 3, 7, 12),
     [at(2026, 3, 8, 5), at(2026, 3, 9, 4)]),
    ("havana fold at 00:30 runs once", "30 0 * * *", "America/Havana", at(2026, 10, 31, 12),
     [at(2026, 11, 1, 4, 30), at(2026, 11, 2, 5, 30)]),
    # No DST at all.
    ("kolkata has no transitions", "30 2 * * *", "Asia/Kolkata", at(2026, 3, 28),
     [at(2026, 3, 28, 21), at(2026, 3, 29, 21)]),
    ("utc has no transitions", "30 2 * * *", "UTC", at(2026, 3, 28, 12),
     [at(2026, 3, 29, 2, 30), at(2026, 3, 30, 2, 30)]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("expr", "zone", "after", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in DST_CASES],
)
def test_next_fire_in_job_timezone_across_dst(
    expr: str, zone: str, after: datetime, expected: list[datetime]
) -> None:
    spec = ScheduleSpec.from_cron(expr, zone)
    assert preview_fires(spec, after, len(expected)) == expected


def test_next_fire_in_job_timezone_across_dst_fall_back_never_repeats_specific_hour() -> None:
    spec = ScheduleSpec.from_cron("30 1 * * *", "America/New_York")
    first = next_fire_after(spec, at(2026, 11, 1))
    assert first == at(2026, 11, 1, 5, 30)
    # Asked again from inside the repeated hour, it moves on to the next day.
    assert next_fire_after(spec, first) == at(2026, 11, 2, 6, 30)
    assert next_fire_after(spec, at(2026, 11, 1, 6, 15)) == at(2026, 11, 2, 6, 30)


def test_gap_firing_is_not_repeated_when_asked_from_inside_the_gap_hour() -> None:
    spec = ScheduleSpec.from_cron("*/15 2 * * *", "Europe/Paris")
    assert next_fire_after(spec, at(2026, 3, 29, 0, 59)) == at(2026, 3, 29, 1)
    assert next_fire_after(spec, at(2026, 3, 29, 1)) == at(2026, 3, 30, 0)


# ---- property: agreement with a minute-by-minute walk over real instants -------------------

ZONES = ["Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Europe/Dublin",
         "America/Santiago", "America/Havana", "Asia/Kolkata", "UTC"]  # fmt: skip
# Transitions of 2026 (UTC instants); the search starts within a day or so of one of them.
TRANSITIONS = [
    at(2026, 3, 29, 1), at(2026, 10, 25, 1), at(2026, 3, 8, 7), at(2026, 11, 1, 6),
    at(2026, 4, 4, 15), at(2026, 10, 3, 15, 30), at(2026, 4, 5, 3), at(2026, 9, 6, 4),
    at(2026, 3, 8, 5), at(2026, 11, 1, 5),
]  # fmt: skip
_frequent_crons = st.tuples(
    st.sampled_from(["*/15", "0", "30", "0,45", "*/20", "59"]),
    st.sampled_from(["*", "*/2", "0", "1", "2", "23", "0-3", "1,2", "*/5"]),
).map(lambda fields: f"{fields[0]} {fields[1]} * * *")


def _local_matches(cron: CronExpression, wall: datetime) -> bool:
    return wall.hour in cron.hours and wall.minute in cron.minutes


def _reference_fires(
    cron: CronExpression, tz: ZoneInfo, after: datetime, end: datetime
) -> list[datetime]:
    """Walk every UTC minute and decide as a person watching the local clock would."""
    fires = []
    moment = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while moment <= end:
        local = moment.astimezone(tz)
        previous = (moment - timedelta(minutes=1)).astimezone(tz).replace(tzinfo=None)
        wall = local.replace(tzinfo=None)
        skipped = []
        step = previous + timedelta(minutes=1)
        while step < wall:  # the clock jumped forward past these wall minutes
            skipped.append(step)
            step += timedelta(minutes=1)
        if cron.hour_is_wildcard:
            fire = _local_matches(cron, wall)
        else:
            fire = (_local_matches(cron, wall) and local.fold == 0) or any(
                _local_matches(cron, gap_wall) for gap_wall in skipped
            )
        if fire:
            fires.append(moment)
        moment += timedelta(minutes=1)
    return fires


@given(
    expr=_frequent_crons,
    zone=st.sampled_from(ZONES),
    transition=st.sampled_from(TRANSITIONS),
    shift=st.integers(min_value=-26 * 60, max_value=26 * 60),
)
@settings(max_examples=120, deadline=None, database=None)
def test_cron_fires_agree_with_a_minute_by_minute_walk(
    expr: str, zone: str, transition: datetime, shift: int
) -> None:
    cron, tz = parse_cron(expr), ZoneInfo(zone)
    after = transition + timedelta(minutes=shift, seconds=17)
    end = after + timedelta(hours=30)
    expected = _reference_fires(cron, tz, after, end)
    spec = ScheduleSpec.from_cron(expr, zone)
    actual = []
    fire = next_fire_after(spec, after)
    while fire is not None and fire <= end:
        actual.append(fire)
        fire = next_fire_after(spec, fire)
    assert actual == expected


@given(
    expr=_frequent_crons,
    zone=st.sampled_from(ZONES),
    transition=st.sampled_from(TRANSITIONS),
    shift=st.integers(min_value=-3 * 24 * 60, max_value=3 * 24 * 60),
)
@settings(max_examples=150, deadline=None, database=None)
def test_fires_increase_and_match_local_time_or_sit_on_a_transition(
    expr: str, zone: str, transition: datetime, shift: int
) -> None:
    cron, tz = parse_cron(expr), ZoneInfo(zone)
    after = transition + timedelta(minutes=shift)
    fires = preview_fires(ScheduleSpec.from_cron(expr, zone), after, 40)
    assert fires[0] > after
    assert all(earlier < later for earlier, later in pairwise(fires))
    for fire in fires:
        assert fire.tzinfo is UTC
        if not _local_matches(cron, fire.astimezone(tz)):
            # Only a gap firing moved to the transition instant may show another wall time.
            before = (fire - timedelta(seconds=1)).astimezone(tz).utcoffset()
            assert before != fire.astimezone(tz).utcoffset()
            assert not cron.hour_is_wildcard
