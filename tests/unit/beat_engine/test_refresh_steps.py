"""A refresh pass goes on, a bounded number of rows a step, with the partitions whose page was
full, each after the row its page ended at, until none is left."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from beat_engine.refresh_steps import RefreshSteps

T = datetime(2026, 1, 1, tzinfo=UTC)
ROW = (T, uuid.UUID(int=7))


def test_the_first_step_shares_the_rows_among_every_partition() -> None:
    steps = RefreshSteps(step_rows=100)
    steps.begin([3, 1, 2, 1])
    assert steps.step() == ([1, 2, 3], 34, {})


def test_partitions_with_a_full_page_go_on_after_their_last_row_with_the_whole_step() -> None:
    steps = RefreshSteps(step_rows=100)
    steps.begin(range(10))
    steps.ended({4: ROW})
    assert steps.going
    assert steps.step() == ([4], 100, {4: ROW})
    steps.ended({})
    assert not steps.going
    assert steps.step() == ([], 0, {})


def test_a_partition_given_up_leaves_the_pass() -> None:
    steps = RefreshSteps(step_rows=10)
    steps.begin([1, 2])
    steps.ended({1: ROW, 2: ROW})
    steps.forget([1])
    assert steps.step() == ([2], 10, {2: ROW})


def test_a_row_reported_for_a_partition_outside_the_pass_is_ignored() -> None:
    steps = RefreshSteps(step_rows=10)
    steps.begin([1])
    steps.ended({9: ROW})
    assert not steps.going


def test_at_least_one_row_a_partition() -> None:
    steps = RefreshSteps(step_rows=2)
    steps.begin(range(5))
    assert steps.step()[1] == 1
