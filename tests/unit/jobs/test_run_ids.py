"""Run ids carry their firing's millisecond: one UTC day of firings is one contiguous id range."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from uuid import UUID

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobs.run_ids import (
    day_id_range,
    instant_ms,
    run_id_ceil,
    run_id_day,
    run_id_floor,
    run_id_for,
    run_id_ms,
)

T0 = datetime(2026, 12, 1, 10, 30, 15, 123456, tzinfo=UTC)
# Naive bounds, as hypothesis wants them; every instant drawn is in UTC.
instants = st.datetimes(
    min_value=datetime(1970, 1, 1),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.just(UTC),
)


def test_the_id_is_a_version_7_uuid_whose_prefix_is_the_instants_millisecond() -> None:
    run_id = run_id_for(T0)
    assert run_id.version == 7
    assert run_id.variant == "specified in RFC 4122"
    assert run_id_ms(run_id) == int(T0.timestamp() * 1000)
    assert run_id_day(run_id) == date(2026, 12, 1)


def test_the_rest_is_random() -> None:
    assert len({run_id_for(T0) for _ in range(1000)}) == 1000
    zeros = run_id_for(T0, randbytes=lambda n: bytes(n))
    ones = run_id_for(T0, randbytes=lambda n: b"\xff" * n)
    # The version and variant bits sit between the instant's floor and ceiling.
    assert run_id_floor(T0) < zeros < ones < run_id_ceil(T0)
    assert (zeros.version, ones.version) == (7, 7)


@given(instants, st.binary(min_size=10, max_size=10))
def test_an_id_lies_in_its_instants_millisecond_and_its_days_range(
    instant: datetime, rand: bytes
) -> None:
    run_id = run_id_for(instant, randbytes=lambda n: rand)
    assert run_id_floor(instant) <= run_id <= run_id_ceil(instant)
    low, high = day_id_range(instant.date())
    assert low <= run_id < high
    assert run_id_day(run_id) == instant.date()


@given(instants, instants)
def test_ids_are_ordered_as_their_instants(a: datetime, b: datetime) -> None:
    if instant_ms(a) < instant_ms(b):
        assert run_id_ceil(a) < run_id_floor(b)
        assert run_id_for(a) < run_id_for(b)


@given(st.dates(min_value=date(1970, 1, 1), max_value=date(9999, 12, 30)))
def test_consecutive_days_share_their_bound(day: date) -> None:
    low, high = day_id_range(day)
    assert low < high
    assert day_id_range(day + timedelta(days=1))[0] == high
    # The last microsecond of the day is inside, midnight of the next day is not.
    end = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
    assert low <= run_id_ceil(end - timedelta(microseconds=1)) < high
    assert run_id_floor(end) == high


def test_instants_outside_the_48_bit_range_are_clamped() -> None:
    assert run_id_floor(datetime(1960, 1, 1, tzinfo=UTC)) == UUID(int=0)
    assert run_id_ms(run_id_for(datetime(1969, 12, 31, 23, 59, tzinfo=UTC))) == 0
    assert run_id_ms(run_id_for(datetime(9999, 12, 31, 23, 59, tzinfo=UTC))) < (1 << 48)


def test_a_naive_instant_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        run_id_for(datetime(2026, 12, 1))  # noqa: DTZ001
