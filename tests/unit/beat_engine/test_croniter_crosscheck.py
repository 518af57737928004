"""croniter as an independent oracle where its rules and ours coincide (UTC, no DST).

Where they differ we follow our documented rules: croniter 7 fires a fixed-hour job twice
when its local time repeats at fall-back (`30 1 * * *` in America/New_York on
2026-11-01 gives 01:30 EDT and 01:30 EST); ours fires once, at the first occurrence.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from beat_engine.schedules import ScheduleKind, ScheduleSpec, iter_fires

MINUTES = st.sampled_from(["*", "0", "*/15", "5,35", "10-20", "59"])
HOURS = st.sampled_from(["*", "0", "9", "*/6", "1-3", "23"])
# Day-of-month and day-of-week stay plain (no `*/n`): croniter and Vixie differ on whether
# a field that starts with `*` counts as restricted.
DOMS = st.sampled_from(["*", "1", "13", "28", "1,15", "29"])
MONTHS = st.sampled_from(["*", "2", "1-6", "*/3", "12"])
DOWS = st.sampled_from(["*", "0", "5", "1-5", "6,0"])
INSTANTS = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001 - made aware below
    max_value=datetime(2030, 12, 31),  # noqa: DTZ001
)


@settings(max_examples=150, deadline=None, database=None)
@given(MINUTES, HOURS, DOMS, MONTHS, DOWS, INSTANTS)
def test_utc_fires_agree_with_croniter(
    minute: str, hour: str, dom: str, month: str, dow: str, start: datetime
) -> None:
    expr = f"{minute} {hour} {dom} {month} {dow}"
    after = start.replace(tzinfo=UTC, microsecond=0)
    spec = ScheduleSpec(kind=ScheduleKind.CRON, cron=expr, timezone="UTC")
    ours = list(iter_fires(spec, after, limit=5))
    oracle = croniter(expr, after)
    theirs = [oracle.get_next(datetime) for _ in range(len(ours))]
    assert ours == theirs, expr


def test_fixed_hour_job_fires_once_at_fall_back_where_croniter_fires_twice() -> None:
    spec = ScheduleSpec(kind=ScheduleKind.CRON, cron="30 1 * * *", timezone="America/New_York")
    start = datetime(2026, 10, 31, 16, 0, tzinfo=UTC)
    fires = list(iter_fires(spec, start, until=start + timedelta(days=2)))
    assert fires == [
        datetime(2026, 11, 1, 5, 30, tzinfo=UTC),  # 01:30 EDT, the first occurrence
        datetime(2026, 11, 2, 6, 30, tzinfo=UTC),  # 01:30 EST the next day
    ]
