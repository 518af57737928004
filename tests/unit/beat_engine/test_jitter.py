"""Deterministic per-job jitter."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime, timedelta
from uuid import UUID, uuid4
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beat_engine.jitter import apply_jitter, jitter_offset

JOB = UUID("3f2b8c1e-7d4a-4b6e-9a0f-1c2d3e4f5a6b")


@pytest.mark.parametrize("window", [timedelta(0), timedelta(microseconds=1)])
def test_zero_window_gives_zero_offset(window: timedelta) -> None:
    assert jitter_offset(JOB, window) == timedelta(0)


def test_offset_is_pinned_so_every_node_and_release_agrees() -> None:
    # A change here moves every job's firing time: make it deliberately, not by accident.
    assert jitter_offset(JOB, timedelta(minutes=1)) == timedelta(seconds=1, microseconds=532_520)


def test_offsets_spread_jobs_across_the_window() -> None:
    window = timedelta(seconds=60)
    offsets = [jitter_offset(uuid4(), window).total_seconds() for _ in range(2000)]
    assert 27 < statistics.mean(offsets) < 33
    assert len({int(offset) for offset in offsets}) == 60


def test_negative_window_is_refused() -> None:
    with pytest.raises(ValueError, match="must not be negative"):
        jitter_offset(JOB, timedelta(seconds=-1))


def test_apply_jitter_adds_elapsed_time_in_utc() -> None:
    scheduled = datetime(2026, 3, 29, 1, 59, tzinfo=ZoneInfo("Europe/Paris"))
    jittered = apply_jitter(scheduled, JOB, timedelta(hours=2))
    assert jittered.tzinfo is UTC
    assert jittered - scheduled == jitter_offset(JOB, timedelta(hours=2))


def test_apply_jitter_refuses_naive_instants() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        apply_jitter(datetime(2026, 1, 1), JOB, timedelta(seconds=5))  # noqa: DTZ001


@given(
    job_id=st.uuids(),
    window=st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(days=2)),
)
@settings(max_examples=200, deadline=None, database=None)
def test_jitter_stable_per_job_and_within_window(job_id: UUID, window: timedelta) -> None:
    offset = jitter_offset(job_id, window)
    assert timedelta(0) <= offset < window
    assert jitter_offset(UUID(str(job_id)), window) == offset
