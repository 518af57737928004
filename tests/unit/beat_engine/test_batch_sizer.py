"""BatchSizer: claim batches sized from their measured time, so that one takes about the target."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from beat_engine.batch_sizer import BatchSizer


def test_the_full_batch_until_one_was_measured() -> None:
    assert BatchSizer(most=1000, target_s=0.25).size() == 1000


def test_a_slow_claim_shrinks_the_batch_to_the_target_time() -> None:
    sizer = BatchSizer(most=1000, target_s=0.25, least=100)
    # 1,000 rows in 0.5 s: 0.5 ms a row, so 500 rows take the target 0.25 s.
    sizer.observed(1000, 0.5)
    assert sizer.size() == 500


def test_a_fast_claim_keeps_the_configured_batch() -> None:
    sizer = BatchSizer(most=1000, target_s=0.25)
    sizer.observed(1000, 0.07)
    assert sizer.size() == 1000


def test_never_below_the_least_nor_above_the_most() -> None:
    sizer = BatchSizer(most=1000, target_s=0.25, least=100)
    sizer.observed(1000, 30.0)
    assert sizer.size() == 100
    sizer = BatchSizer(most=1000, target_s=0.25, least=5000)
    assert sizer.least == 1000


def test_batches_smaller_than_the_least_are_not_measured() -> None:
    """A latecomer's batch of one took 30 ms: its fixed cost, not 30 ms a row."""
    sizer = BatchSizer(most=1000, target_s=0.25, least=100)
    sizer.observed(1, 0.03)
    assert sizer.per_row_s is None
    assert sizer.size() == 1000


def test_one_slow_batch_moves_the_size_by_the_smoothing_only() -> None:
    sizer = BatchSizer(most=1000, target_s=0.25, least=10, smoothing=0.3)
    for _ in range(20):
        sizer.observed(500, 0.125)
    assert sizer.size() == 1000 or sizer.size() == 999
    sizer.observed(500, 1.25)  # ten times slower, once
    per_row = sizer.per_row_s
    assert per_row == pytest.approx(0.00025 + 0.3 * (0.0025 - 0.00025))
    assert sizer.size() == int(0.25 / per_row)
    for _ in range(30):
        sizer.observed(sizer.size(), 0.00025 * sizer.size())
    assert sizer.size() >= 990


def test_no_target_is_the_fixed_batch() -> None:
    sizer = BatchSizer(most=1000, target_s=0.0)
    sizer.observed(1000, 5.0)
    assert sizer.size() == 1000


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="at least one"):
        BatchSizer(most=0)
    with pytest.raises(ValueError, match="target"):
        BatchSizer(most=10, target_s=-1)
    with pytest.raises(ValueError, match="smoothing"):
        BatchSizer(most=10, smoothing=0)


@given(
    fixed_ms=st.floats(min_value=0.0, max_value=200.0),
    per_row_us=st.floats(min_value=10.0, max_value=5000.0),
)
def test_batches_that_cost_a_fixed_time_plus_one_per_row_settle_at_the_target(
    fixed_ms: float, per_row_us: float
) -> None:
    """A batch of n rows takes fixed + n x per_row: the sizes settle where one takes about the
    target (within a row of it), or at a bound when the target lies outside the range."""
    target = 0.25
    sizer = BatchSizer(most=1000, target_s=target, least=50, smoothing=0.3)

    def took(n: int) -> float:
        return fixed_ms / 1000 + n * per_row_us / 1e6

    for _ in range(200):
        n = sizer.size()
        sizer.observed(n, took(n))
    n = sizer.size()
    if took(1000) <= target:
        assert n == 1000
    elif took(50) >= target:
        assert n == 50
    else:
        assert took(n) <= target + per_row_us / 1e6 + 1e-9
        assert took(n + 2) >= target - 1e-9
