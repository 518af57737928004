"""bench/bench_scale.py's mix: the group bounds give the design's average rate and the shares
its docstring states. The seeding and the measurement themselves run against real servers in
the benchmark."""

from __future__ import annotations

import pytest

from bench.bench_scale import bounds


def test_the_mix_at_twenty_million_fires_about_5600_a_second_in_the_window() -> None:
    b = bounds(20_000_000, 50_000)

    hourly = b["b_hourly"]
    intervals = b["b_interval"] - b["b_midnight"]
    once = b["b_once"] - b["b_daily"]
    spike = 20_000_000 - b["b_once"]
    assert (hourly, b["b_midnight"] - hourly, intervals, once, spike) == (
        12_000_000, 3_000_000, 2_000_000, 1_000_000, 50_000
    )  # fmt: skip
    # Hourly jobs fire once an hour, the intervals every 900 s; the daily and midnight groups
    # fire outside the window, and one-offs spread over seven days add under 2 a second.
    rate = hourly / 3600 + intervals / 900 + once / (7 * 86_400)
    assert 5_500 < rate < 5_700


def test_the_groups_are_in_order_and_cover_every_row() -> None:
    b = bounds(1_000, 10)

    order = [b["b_hourly"], b["b_midnight"], b["b_interval"], b["b_daily"], b["b_once"]]
    assert order == sorted(order)
    assert 1_000 - b["b_once"] == 10


def test_a_spike_larger_than_the_daily_group_is_refused() -> None:
    with pytest.raises(SystemExit, match="no room for the daily group"):
        bounds(1_000, 200)
