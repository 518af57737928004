"""Which runs' writes may address their day partitions: well inside the hot window only."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from jobs.own_partition import MARGIN_DAYS, PARENTS, Tables, addressable

NOW = datetime(2026, 12, 8, 0, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("days_before", "expected"),
    [
        (0, True),
        (-3, True),  # a run claimed ahead, tomorrow's and later
        (30 - MARGIN_DAYS, True),
        (30 - MARGIN_DAYS + 1, False),
        (30, False),  # the hot window's first day: the next archive may detach it
        (31, False),
    ],
)
def test_only_days_at_least_the_margin_inside_the_hot_window_are_addressable(
    days_before: int, expected: bool
) -> None:
    day: date = NOW.date() - timedelta(days=days_before)
    assert addressable(day, now=NOW, hot_days=30) is expected


def test_tables_fill_both_tokens_and_the_parents_are_the_history_tables() -> None:
    template = "UPDATE {runs} SET x = 1; INSERT INTO {attempts} VALUES (1); UPDATE {runs} AS r"
    tables = Tables("jobs_jobrun_p20261208", "jobs_runattempt_p20261208")
    assert tables.address(template) == (
        "UPDATE jobs_jobrun_p20261208 SET x = 1; INSERT INTO jobs_runattempt_p20261208 "
        "VALUES (1); UPDATE jobs_jobrun_p20261208 AS r"
    )
    assert PARENTS.address("{runs} {attempts}") == "jobs_jobrun jobs_runattempt"
