"""The failover scenario's arithmetic: resume time, misses and duplicates from timestamps."""

from __future__ import annotations

import pytest

from bench.compare.contender import Firing, Victim
from bench.compare.failover import (
    anchored_counts,
    failover_stats,
    gap_counts,
    lateness_stats,
    resume_after,
)
from bench.compare.ours import pick_victim
from bench.compare.steady import SteadyPlan, entry_name


def test_resume_is_the_first_publish_after_the_kill() -> None:
    assert resume_after(100.0, [99.0, 99.9, 111.5, 110.25]) == pytest.approx(10.25)


def test_nothing_after_the_kill_means_never_resumed() -> None:
    assert resume_after(100.0, [98.0, 99.0]) is None


@pytest.mark.parametrize(
    ("sends", "expected"),
    [
        # On time every period until the end: nothing owed.
        ([0.0, 10.01, 20.02, 30.03], (0, 0)),
        # One send 7 s late (outage shorter than a period): late, not missed; it re-anchors.
        ([0.0, 17.0, 27.0, 37.0], (0, 0)),
        # 25 s gap: instants at +10 and +20 were owed, the send at 35 serves one of them.
        ([0.0, 10.0, 35.0], (1, 0)),
        # Two sends 0.2 s apart: the second is a duplicate.
        ([0.0, 10.0, 10.2, 20.0, 30.0], (0, 1)),
        # Stopped after 10.0: the instants at 20 and 30 before the end went unserved.
        ([0.0, 10.0], (2, 0)),
        # Never sent at all: every instant up to the end.
        ([], (4, 0)),
    ],
)
def test_gap_counts_for_re_anchoring_entries(sends: list[float], expected: tuple[int, int]) -> None:
    assert gap_counts(0.0, sends, 10.0, until=39.0) == expected


def test_anchored_counts_find_missed_and_repeated_grid_instants() -> None:
    plan = SteadyPlan(entries=2, period_s=10, start_at=0.0)  # job 0 at 0, 10...; job 1 at 5, 15...
    firings = [
        Firing(entry_name(0), 0.1, 0.0),
        Firing(entry_name(0), 10.1, 10.0),
        Firing(entry_name(0), 10.2, 10.0),  # replayed twice: one duplicate
        Firing(entry_name(1), 5.1, 5.0),  # 15.0 never fired: one miss
    ]

    assert anchored_counts(plan, firings, until=18.0) == (1, 1)


def test_lateness_after_the_kill_and_once_settled() -> None:
    timeline = [(99.0, 0.01), (111.0, 10.5), (112.0, 9.0), (125.0, 0.02)]

    p99, worst, settled = lateness_stats(timeline, kill_at=100.0, resume_s=11.0, period=10.0)

    assert (p99, worst, settled) == (10.5, 10.5, 0.02)


def test_failover_stats_take_resume_from_the_victims_partitions_only() -> None:
    plan = SteadyPlan(entries=2, period_s=10, start_at=0.0)
    firings = [
        # Partition 1 (the survivor's) keeps publishing right after the kill at 12.0...
        Firing(entry_name(1), 15.0, 15.0, partition=1),
        # ...while partition 0 (the victim's) resumes only when its lease expired.
        Firing(entry_name(0), 0.0, 0.0, partition=0),
        Firing(entry_name(0), 22.5, 10.0, partition=0),
        Firing(entry_name(0), 22.6, 20.0, partition=0),
        Firing(entry_name(1), 5.0, 5.0, partition=1),
    ]
    timeline = sorted((f.published_at or 0.0, (f.published_at or 0.0) - (f.scheduled_at or 0.0))
                      for f in firings)  # fmt: skip

    stats = failover_stats(plan, firings, Victim(0, frozenset({0}), 0.5), 12.0, 27.0, timeline)

    assert stats.resume_s == pytest.approx(10.5)
    assert (stats.misses, stats.duplicates) == (0, 0)
    assert stats.lateness_max_after == pytest.approx(12.5)


def test_victim_is_the_node_with_most_partitions() -> None:
    leases = {0: "bench-1", 1: "bench-0", 2: "bench-1", 3: "bench-1"}

    victim = pick_victim(leases, ["bench-0", "bench-1"])

    assert victim == Victim(1, frozenset({0, 2, 3}), 0.75)


def test_no_lease_no_victim() -> None:
    assert pick_victim({}, ["bench-0", "bench-1"]) is None
