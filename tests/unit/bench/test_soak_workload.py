"""The soak's jobs, and the firings their schedules define over a window."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from bench.soak.target import status_for
from bench.soak.workload import (
    INTERVALS_S,
    expected_firings,
    firing_key,
    firing_rate,
    workload,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
S = timedelta(seconds=1)


@pytest.mark.parametrize("rate", [40, 200, 333])
def test_the_jobs_fire_at_the_asked_rate(rate: int) -> None:
    assert firing_rate(workload(rate, seed=1)) == pytest.approx(rate, rel=0.01)


def test_first_firings_are_spread_evenly_over_each_interval() -> None:
    jobs = workload(200, seed=1)

    for interval in INTERVALS_S:
        offsets = [j.offset_ms for j in jobs if j.interval_s == interval]
        gaps = {b - a for a, b in itertools.pairwise(offsets)}
        assert max(gaps) - min(gaps) <= 1
        assert offsets[0] == 0
        assert offsets[-1] < interval * 1000


def test_the_seed_draws_paths_and_critical_jobs() -> None:
    jobs = workload(200, seed=1)

    assert workload(200, seed=1) == jobs
    assert workload(200, seed=2) != jobs
    paths = Counter(j.path for j in jobs)
    assert set(paths) == {"/ok", "/flaky", "/slow", "/fail"}
    assert 0.25 < sum(j.critical for j in jobs) / len(jobs) < 0.35


def test_expected_firings_from_an_anchor_inside_the_window() -> None:
    fires = list(expected_firings(T0 + 2 * S, 10 * S, T0, T0 + 32 * S))

    assert fires == [T0 + 2 * S, T0 + 12 * S, T0 + 22 * S, T0 + 32 * S]


def test_expected_firings_of_an_anchor_before_the_window_start_at_the_first_inside() -> None:
    assert list(expected_firings(T0, 10 * S, T0 + 25 * S, T0 + 40 * S)) == [
        T0 + 30 * S,
        T0 + 40 * S,
    ]
    # Both ends are inclusive.
    assert list(expected_firings(T0, 10 * S, T0 + 20 * S, T0 + 20 * S)) == [T0 + 20 * S]


def test_no_firing_when_the_window_ends_before_the_anchor() -> None:
    assert list(expected_firings(T0 + 60 * S, 10 * S, T0, T0 + 59 * S)) == []


def test_a_firing_key_is_the_same_from_a_header_and_from_a_row() -> None:
    header = "2026-12-01T10:00:00.100000+01:00"

    assert firing_key("job", header) == firing_key("job", T0 + timedelta(milliseconds=100))
    assert firing_key("job", T0) == ("job", "2026-12-01T09:00:00.000000+00:00")
    with pytest.raises(ValueError, match="aware"):
        firing_key("job", datetime(2026, 12, 1, 9, 0))  # noqa: DTZ001 - the case refused


def test_the_target_paths_answer_as_the_workload_says() -> None:
    assert status_for("/ok", 1) == 200
    assert [status_for("/flaky", n) for n in (1, 2)] == [503, 200]
    assert status_for("/fail", 3) == 500
    assert status_for("/elsewhere", 1) == 404
