"""The day partitions' names and DDL (the layout contract of docs/history.md, "Partitions")."""

from __future__ import annotations

from datetime import date

import pytest

from jobs.run_ids import day_id_range
from jobs.run_partitions import (
    ATTEMPT_TABLE,
    RUN_TABLE,
    bounds_sql,
    create_day_partition_sql,
    days_between,
    default_partition_name,
    parse_partition_name,
    partition_name,
)

DAY = date(2026, 12, 1)


def test_names_round_trip() -> None:
    assert partition_name(RUN_TABLE, DAY) == "jobs_jobrun_p20261201"
    assert partition_name(ATTEMPT_TABLE, DAY) == "jobs_runattempt_p20261201"
    assert parse_partition_name("jobs_jobrun_p20261201") == (RUN_TABLE, DAY)
    assert parse_partition_name("jobs_runattempt_p20261201") == (ATTEMPT_TABLE, DAY)
    assert default_partition_name(RUN_TABLE) == "jobs_jobrun_default"


@pytest.mark.parametrize(
    "name", ["jobs_jobrun_default", "jobs_jobrun_p20261301", "jobs_job_p20261201", "jobs_jobrun"]
)
def test_other_names_are_not_day_partitions(name: str) -> None:
    assert parse_partition_name(name) is None


def test_only_history_tables_have_partitions() -> None:
    with pytest.raises(ValueError, match="not a partitioned history table"):
        partition_name("jobs_job", DAY)


def test_bounds_are_the_days_id_range() -> None:
    low, high = day_id_range(DAY)
    assert bounds_sql(DAY) == f"FROM ('{low}') TO ('{high}')"


def test_a_run_partition_has_the_firing_day_check_and_its_unique_index() -> None:
    runs = " ".join(create_day_partition_sql(RUN_TABLE, DAY))
    assert (
        "jobs_jobrun_p20261201_firing_day CHECK (scheduled_for >= '2026-12-01T00:00:00+00:00'"
        in runs
    )
    index = "CREATE UNIQUE INDEX jobs_jobrun_p20261201_firing ON jobs_jobrun_p20261201"
    assert f"{index} (job_id, scheduled_for)" in runs
    assert f"ATTACH PARTITION jobs_jobrun_p20261201 FOR VALUES {bounds_sql(DAY)}" in runs
    attempts = " ".join(create_day_partition_sql(ATTEMPT_TABLE, DAY))
    assert "firing" not in attempts
    assert "run_id >=" in attempts


def test_days_between_starts_no_earlier_than_1970() -> None:
    assert days_between(date(1969, 12, 30), date(1970, 1, 2)) == [
        date(1970, 1, 1), date(1970, 1, 2)
    ]  # fmt: skip
    assert days_between(DAY, DAY) == [DAY]
