"""Cron parsing, validation and the firing instants of cron, interval and one-off specs."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beat_engine.schedules import (
    CronExpression,
    ScheduleError,
    ScheduleKind,
    ScheduleSpec,
    count_fires,
    iter_fires,
    last_fires,
    next_fire_after,
    parse_cron,
    parse_timezone,
    preview_fires,
)


def at(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, micro: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


# ---- parsing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "attribute", "expected"),
    [
        ("5/15 * * * *", "minutes", {5, 20, 35, 50}),
        ("1-30/5 * * * *", "minutes", {1, 6, 11, 16, 21, 26}),
        ("*/15 * * * *", "minutes", {0, 15, 30, 45}),
        ("1,2,59 * * * *", "minutes", {1, 2, 59}),
        ("0 9-17 * * *", "hours", {9, 10, 11, 12, 13, 14, 15, 16, 17}),
        ("0 0 */10 * *", "days_of_month", {1, 11, 21, 31}),
        ("0 0 * JAN-MAR *", "months", {1, 2, 3}),
        ("0 0 * jan,Dec *", "months", {1, 12}),
        ("0 0 * * mon-FRI", "days_of_week", {1, 2, 3, 4, 5}),
        ("0 0 * * 7", "days_of_week", {0}),
        ("0 0 * * 5-7", "days_of_week", {5, 6, 0}),
        ("0 0 * * */2", "days_of_week", {0, 2, 4, 6}),
        ("0\t9  * * *", "hours", {9}),
    ],
)
def test_parse_cron_expands_fields_like_vixie(
    expr: str, attribute: str, expected: set[int]
) -> None:
    assert getattr(parse_cron(expr), attribute) == expected


@pytest.mark.parametrize(
    ("expr", "dom_star", "dow_star", "hour_is_wildcard"),
    [
        ("0 9 * * *", True, True, False),
        ("0 * * * *", True, True, True),
        ("0 */2 * * *", True, True, True),
        ("0 1-23/2 * * *", True, True, True),
        ("0 9-17 * * *", True, True, False),
        ("0 0 13 * 5", False, False, False),
        ("0 0 */2 * 5", True, False, False),
        ("0 0 13 * */1", False, True, False),
    ],
)
def test_parse_cron_records_star_fields(
    expr: str, dom_star: bool, dow_star: bool, hour_is_wildcard: bool
) -> None:
    cron = parse_cron(expr)
    assert (cron.dom_star, cron.dow_star, cron.hour_is_wildcard) == (
        dom_star,
        dow_star,
        hour_is_wildcard,
    )


@pytest.mark.parametrize(
    ("macro", "expansion"),
    [
        ("@hourly", "0 * * * *"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@DAILY", "0 0 * * *"),
    ],
)
def test_macros_mean_their_five_field_expansion(macro: str, expansion: str) -> None:
    parsed, expected = parse_cron(macro), parse_cron(expansion)
    assert (parsed.minutes, parsed.hours, parsed.days_of_month) == (
        expected.minutes,
        expected.hours,
        expected.days_of_month,
    )
    assert (parsed.months, parsed.days_of_week, parsed.hour_is_wildcard) == (
        expected.months,
        expected.days_of_week,
        expected.hour_is_wildcard,
    )


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("", "schedule is empty"),
        ("   ", "schedule is empty"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * *", "expected 5 fields"),
        ("60 * * * *", "minute field '60': 60 is out of range 0-59"),
        ("0 24 * * *", "hour field '24': 24 is out of range 0-23"),
        ("0 0 0 * *", "day-of-month field '0': 0 is out of range 1-31"),
        ("0 0 * 13 *", "month field '13': 13 is out of range 1-12"),
        ("0 0 * * 8", "day-of-week field '8': 8 is out of range 0-7"),
        ("*/0 * * * *", "minute field '*/0': step 0 is out of range"),
        ("*/61 * * * *", "step 61 is out of range 1-59"),
        ("*/x * * * *", "step 'x' is not a number"),
        ("5-1 * * * *", "minute field '5-1': range 5-1 is reversed"),
        ("0 0 * * FRI-MON", "range FRI-MON is reversed"),
        ("0 0 * FOO *", "month field 'FOO': unknown name 'FOO'"),
        ("0 0 * * FUN", "day-of-week field 'FUN': unknown name 'FUN'"),
        ("0 MON * * *", "hour field 'MON': 'MON' is not a number"),
        ("1,,2 * * * *", "empty item"),
        ("1, * * * *", "empty item"),
        ("0 0 * * MON-", "incomplete range"),
        ("-5 * * * *", "incomplete range"),
        ("0 9 * * *\n", "control character"),
        ("0 9 * * *\x00", "control character"),
        ("0 9 * * lun\u00e9", "non-ASCII character"),
        ("0 9 * * *" + " " * 130, "the limit is 128"),
        ("@reboot", "@reboot is not supported"),
        ("@fortnightly", "unknown macro '@fortnightly'"),
        ("0 0 30 2 *", "never fires: day 30 does not occur in February"),
        ("0 0 30,31 2 *", "never fires: days 30 and 31 do not occur in February"),
        (
            "0 0 31 4,6,9,11 *",
            "never fires: day 31 does not occur in April, June, September or November",
        ),
    ],
)
def test_bad_cron_is_rejected_with_the_reason(expr: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_cron(expr)
    assert caught.value.field == "schedule"
    assert reason in str(caught.value)


@pytest.mark.parametrize(
    "expr",
    ["0 0 29 2 *", "0 0 31 * *", "0 0 30 2 1", "0 0 31 2,3 *", "0 0 */31 2 *", "59 23 31 12 7"],
)
def test_cron_that_can_fire_is_accepted(expr: str) -> None:
    assert isinstance(parse_cron(expr), CronExpression)


def test_february_29th_fires_every_leap_year() -> None:
    spec = ScheduleSpec.from_cron("0 0 29 2 *")
    assert preview_fires(spec, at(2026, 1, 1), 2) == [at(2028, 2, 29), at(2032, 2, 29)]


# ---- time zones ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata", "EST", "PST8PDT"]
)
def test_iana_time_zones_are_accepted(name: str) -> None:
    assert parse_timezone(name) == ZoneInfo(name)


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("", "timezone is required"),
        ("  ", "timezone is required"),
        ("PST", "unknown time zone 'PST'"),
        ("CEST", "unknown time zone"),
        ("BST", "unknown time zone"),
        ("IST", "unknown time zone"),
        ("europe/paris", "unknown time zone"),
        ("Mars/Olympus_Mons", "unknown time zone"),
        ("../etc/passwd", "unknown time zone"),
        ("Europe/../Europe/Paris", "unknown time zone"),
        ("/usr/share/zoneinfo/UTC", "unknown time zone"),
        ("+02:00", "fixed UTC offset"),
        ("-0500", "fixed UTC offset"),
        ("UTC+2", "fixed UTC offset"),
        ("GMT-3", "fixed UTC offset"),
        # Listed by available_timezones() on many hosts, but they follow the host's setting.
        ("localtime", "unknown time zone"),
        ("Factory", "unknown time zone"),
        ("posixrules", "unknown time zone"),
        ("posix/Europe/Paris", "unknown time zone"),
        ("right/UTC", "unknown time zone"),
    ],
)
def test_unknown_time_zones_are_rejected(name: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        parse_timezone(name)
    assert caught.value.field == "timezone"
    assert reason in str(caught.value)


# ---- spec validation -----------------------------------------------------------------------

_NAIVE = datetime(2026, 1, 1)  # noqa: DTZ001 - the naive input under test


@pytest.mark.parametrize(
    ("spec", "field", "reason"),
    [
        (ScheduleSpec(ScheduleKind.ONCE), "run_at", "needs run_at"),
        (ScheduleSpec(ScheduleKind.ONCE, run_at=_NAIVE), "run_at", "must include a UTC offset"),
        (
            ScheduleSpec(ScheduleKind.ONCE, run_at=at(2026, 1, 1), cron="* * * * *"),
            "schedule",
            "takes no schedule",
        ),
        (ScheduleSpec(ScheduleKind.CRON), "schedule", "needs a schedule"),
        (ScheduleSpec(ScheduleKind.CRON, cron="61 * * * *"), "schedule", "out of range"),
        (ScheduleSpec(ScheduleKind.CRON, cron="0 9 * * *", timezone="PST"), "timezone", "PST"),
        (
            ScheduleSpec(ScheduleKind.CRON, cron="0 9 * * *", interval=timedelta(1)),
            "interval",
            "takes no interval",
        ),
        (ScheduleSpec(ScheduleKind.INTERVAL, anchor=at(2026, 1, 1)), "interval", "needs"),
        (
            ScheduleSpec(ScheduleKind.INTERVAL, interval=timedelta(0), anchor=at(2026, 1, 1)),
            "interval",
            "at least 1 second",
        ),
        (
            ScheduleSpec(ScheduleKind.INTERVAL, interval=timedelta(seconds=-5), anchor=_NAIVE),
            "interval",
            "at least 1 second",
        ),
        (
            ScheduleSpec(
                ScheduleKind.INTERVAL, interval=timedelta(milliseconds=500), anchor=at(2026, 1, 1)
            ),
            "interval",
            "at least 1 second",
        ),
        (ScheduleSpec(ScheduleKind.INTERVAL, interval=timedelta(1)), "start_at", "needs start_at"),
        (
            ScheduleSpec(ScheduleKind.INTERVAL, interval=timedelta(1), anchor=_NAIVE),
            "start_at",
            "must include a UTC offset",
        ),
        (
            ScheduleSpec(
                ScheduleKind.INTERVAL, interval=timedelta(1), anchor=at(2026, 1, 1), run_at=_NAIVE
            ),
            "run_at",
            "takes no run_at",
        ),
    ],
)
def test_invalid_spec_names_the_bad_field(spec: ScheduleSpec, field: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as caught:
        spec.validate()
    assert caught.value.field == field
    assert reason in str(caught.value)


def test_factories_build_valid_specs() -> None:
    assert ScheduleSpec.from_cron("0 9 * * *", "Europe/Paris").kind is ScheduleKind.CRON
    assert ScheduleSpec.once(at(2026, 1, 1)).kind is ScheduleKind.ONCE
    assert ScheduleSpec.every(timedelta(seconds=1), at(2026, 1, 1)).kind is ScheduleKind.INTERVAL
    with pytest.raises(ScheduleError):
        ScheduleSpec.from_cron("0 0 30 2 *")


def test_cron_silent_for_five_years_is_rejected_only_when_now_is_given() -> None:
    # February 29th on a Sunday or Friday (day-of-week is starred, so both must match): the
    # next one after 2026 is Sunday 2032-02-29, beyond the five-year horizon.
    spec = ScheduleSpec(ScheduleKind.CRON, cron="0 0 29 2 */5")
    spec.validate()
    with pytest.raises(ScheduleError, match="no matching time in the next 5 years"):
        spec.validate(now=at(2026, 1, 1))
    assert next_fire_after(spec, at(2026, 1, 1)) is None
    assert next_fire_after(spec, at(2028, 1, 1)) == at(2032, 2, 29)


# ---- firing: cron day rule, interval, once -------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected_days"),
    [
        # Both fields restricted: a Friday OR the 13th.
        ("0 0 13 * 5", ["01-02", "01-09", "01-13", "01-16", "01-23", "01-30", "02-06", "02-13"]),
        ("0 0 1 * MON", ["01-05", "01-12", "01-19", "01-26", "02-01", "02-02"]),
        ("0 0 * * 5", ["01-02", "01-09", "01-16"]),
        ("0 0 13 * *", ["01-13", "02-13", "03-13"]),
        # Day-of-month begins with `*`: an odd day AND a Friday.
        ("0 0 */2 * 5", ["01-09", "01-23", "02-13"]),
        # Day-of-week begins with `*`: the 13th AND any weekday.
        ("0 0 13 * */1", ["01-13", "02-13"]),
    ],
)
def test_day_matching_follows_vixie_cron(expr: str, expected_days: list[str]) -> None:
    fires = preview_fires(ScheduleSpec.from_cron(expr), at(2026, 1, 1), len(expected_days))
    assert [fire.strftime("%m-%d") for fire in fires] == expected_days


def test_next_fire_is_strictly_after_the_instant() -> None:
    spec = ScheduleSpec.from_cron("0 9 * * *")
    assert next_fire_after(spec, at(2026, 1, 1, 9)) == at(2026, 1, 2, 9)
    assert next_fire_after(spec, at(2026, 1, 1, 8, 59, 59, 999999)) == at(2026, 1, 1, 9)


def test_next_fire_accepts_any_aware_instant_and_answers_in_utc() -> None:
    spec = ScheduleSpec.from_cron("0 9 * * *", "Europe/Paris")
    fire = next_fire_after(spec, datetime(2026, 1, 1, 9, tzinfo=ZoneInfo("Europe/Paris")))
    assert fire == at(2026, 1, 2, 8)
    assert fire is not None
    assert fire.tzinfo is UTC


def test_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        next_fire_after(ScheduleSpec.from_cron("0 9 * * *"), _NAIVE)


@pytest.mark.parametrize(
    ("interval", "after", "expected"),
    [
        (timedelta(minutes=10), at(2025, 12, 31), at(2026, 1, 1)),  # before the anchor
        (timedelta(minutes=10), at(2026, 1, 1), at(2026, 1, 1, 0, 10)),  # at the anchor
        (timedelta(minutes=10), at(2026, 1, 1, 0, 10), at(2026, 1, 1, 0, 20)),
        (timedelta(minutes=10), at(2026, 1, 1, 0, 19, 59), at(2026, 1, 1, 0, 20)),
        (timedelta(seconds=7), at(2026, 1, 1, 1), at(2026, 1, 1, 1, 0, 5)),  # 3605 = 515 * 7
        (timedelta(days=1, microseconds=1), at(2026, 1, 3), at(2026, 1, 3, 0, 0, 0, 2)),
    ],
)
def test_interval_fires_at_anchor_plus_whole_intervals(
    interval: timedelta, after: datetime, expected: datetime
) -> None:
    assert next_fire_after(ScheduleSpec.every(interval, at(2026, 1, 1)), after) == expected


def test_interval_is_elapsed_time_across_dst() -> None:
    paris = ZoneInfo("Europe/Paris")
    spec = ScheduleSpec.every(timedelta(days=1), datetime(2026, 3, 28, 12, tzinfo=paris))
    # 24 hours after noon CET is 13:00 CEST: elapsed time, not wall time.
    assert next_fire_after(spec, at(2026, 3, 28, 12)) == at(2026, 3, 29, 11)


@given(
    anchor=st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1)),  # noqa: DTZ001
    interval=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(days=30)),
    offset=st.timedeltas(min_value=timedelta(days=-60), max_value=timedelta(days=3650)),
)
@settings(max_examples=200, deadline=None, database=None)
def test_interval_fire_is_the_first_grid_point_after(
    anchor: datetime, interval: timedelta, offset: timedelta
) -> None:
    anchor = anchor.replace(tzinfo=UTC)
    after = anchor + offset
    fire = next_fire_after(ScheduleSpec.every(interval, anchor), after)
    assert fire is not None
    assert fire > after
    assert (fire - anchor) % interval == timedelta(0)
    assert fire == anchor or fire - interval <= after


def test_once_fires_only_while_run_at_is_ahead() -> None:
    spec = ScheduleSpec.once(datetime(2026, 6, 1, 9, tzinfo=ZoneInfo("Europe/Paris")))
    assert next_fire_after(spec, at(2026, 6, 1)) == at(2026, 6, 1, 7)
    assert next_fire_after(spec, at(2026, 6, 1, 7)) is None
    assert list(iter_fires(spec, at(2026, 1, 1))) == [at(2026, 6, 1, 7)]


def test_iter_fires_stops_at_until_inclusive_and_at_limit() -> None:
    spec = ScheduleSpec.from_cron("0 * * * *")
    fires = list(iter_fires(spec, at(2026, 1, 1), until=at(2026, 1, 1, 3)))
    assert fires == [at(2026, 1, 1, 1), at(2026, 1, 1, 2), at(2026, 1, 1, 3)]
    assert list(iter_fires(spec, at(2026, 1, 1), limit=2)) == fires[:2]
    assert preview_fires(spec, at(2026, 1, 1), 0) == []
    with pytest.raises(ValueError, match="must not be negative"):
        preview_fires(spec, at(2026, 1, 1), -1)


# ---- properties against a brute-force reference (UTC) --------------------------------------

_cron_fields = st.tuples(
    st.sampled_from(["*", "0", "*/15", "5,35", "10-20/5", "7/20", "59"]),
    st.sampled_from(["*", "0", "3", "*/6", "9-17", "23", "1-23/7"]),
    st.sampled_from(["*", "1", "13", "*/10", "29-31", "15,28", "31"]),
    st.sampled_from(["*", "2", "1-6", "*/3", "FEB", "dec", "4,6"]),
    st.sampled_from(["*", "0", "5", "1-5", "SUN", "6,0", "*/3", "7"]),
)
_instants = st.datetimes(
    min_value=datetime(2020, 1, 1),  # noqa: DTZ001
    max_value=datetime(2035, 1, 1),  # noqa: DTZ001
).map(lambda moment: moment.replace(tzinfo=UTC))


def _reference_day_matches(cron: CronExpression, day: date) -> bool:
    dom = day.day in cron.days_of_month
    dow = (day.weekday() + 1) % 7 in cron.days_of_week
    both = cron.dom_star or cron.dow_star
    return day.month in cron.months and ((dom and dow) if both else (dom or dow))


def _reference_next_utc(cron: CronExpression, after: datetime) -> datetime | None:
    """Scan day by day, then minute by minute, the slow and obvious way."""
    day = after.date()
    for _ in range(1832):
        if _reference_day_matches(cron, day):
            midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
            for minute in range(1440):
                moment = midnight + timedelta(minutes=minute)
                if moment > after and moment.hour in cron.hours and moment.minute in cron.minutes:
                    return moment
        day += timedelta(days=1)
    return None


@given(fields=_cron_fields, after=_instants)
@settings(max_examples=200, deadline=None, database=None)
def test_next_fire_in_utc_matches_brute_force_reference(
    fields: tuple[str, ...], after: datetime
) -> None:
    expr = " ".join(fields)
    try:
        cron = parse_cron(expr)
    except ScheduleError:
        return  # some combinations can never fire; the validation table covers those
    expected = _reference_next_utc(cron, after)
    actual = next_fire_after(ScheduleSpec.from_cron(expr), after)
    if expected is None:
        assert actual is None or actual > after + timedelta(days=1829)
    else:
        assert actual == expected


@given(
    fields=_cron_fields,
    zone=st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe"]),
    after=_instants,
    span=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=40)),
    count=st.integers(min_value=1, max_value=30),
)
@settings(max_examples=100, deadline=None, database=None)
def test_count_and_last_fires_agree_with_iteration(
    fields: tuple[str, ...], zone: str, after: datetime, span: timedelta, count: int
) -> None:
    try:
        spec = ScheduleSpec.from_cron(" ".join(fields), zone)
    except ScheduleError:
        return
    until = after + span
    fires = list(iter_fires(spec, after, until=until))
    assert fires == sorted(set(fires))
    assert all(after < fire <= until for fire in fires)
    assert count_fires(spec, after, until) == len(fires)
    assert last_fires(spec, after, until, count) == fires[-count:]


@given(
    interval=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(hours=5)),
    after=_instants,
    span=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=2)),
)
@settings(max_examples=100, deadline=None, database=None)
def test_interval_count_and_last_fires_agree_with_iteration(
    interval: timedelta, after: datetime, span: timedelta
) -> None:
    spec = ScheduleSpec.every(interval, at(2027, 1, 1))
    until = after + span
    fires = list(iter_fires(spec, after, until=until, limit=20_000))
    if len(fires) == 20_000:
        return
    assert count_fires(spec, after, until) == len(fires)
    assert last_fires(spec, after, until, 5) == fires[-5:]
