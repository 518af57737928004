"""Counting a steady run: lateness over time, and for ours, misses and duplicates on the grid."""

from __future__ import annotations

from collections import Counter

from bench.compare.contender import Firing
from bench.compare.runner import SETTLE_S, RunResult
from bench.compare.steady import SteadyPlan, expected_grid, peer_timeline

# Firings due this close to the stop may still be in flight when the scheduler is stopped.
IN_FLIGHT_S = 2.0


def plan_of(result: RunResult) -> SteadyPlan:
    return SteadyPlan(result.case.due, result.case.period_s, result.due_at)


def count_steady(result: RunResult, firings: list[Firing]) -> None:
    plan = plan_of(result)
    end = result.due_at + result.case.duration_s
    timed = [f for f in firings if f.published_at is not None and f.published_at <= end + SETTLE_S]
    result.untimed = len(firings) - len(timed)
    if timed and all(f.scheduled_at is not None for f in timed):
        _count_anchored(result, timed, plan, end)
    else:
        # Re-anchoring interval schedules have no fixed grid to count misses against.
        result.counted = False
        pairs = [(f.name, f.published_at) for f in timed if f.published_at is not None]
        result.timeline = peer_timeline(plan, pairs)
    result.lateness_s = sorted(late for _, late in result.timeline)


def _count_anchored(result: RunResult, firings: list[Firing], plan: SteadyPlan, end: float) -> None:
    seen = Counter((f.name, round(f.scheduled_at or 0.0, 3)) for f in firings)
    result.duplicates = sum(n - 1 for n in seen.values() if n > 1)
    grid = expected_grid(plan, end - IN_FLIGHT_S)
    expected = {(name, round(at, 3)) for name, ats in grid.items() for at in ats}
    result.misses = len(expected - set(seen))
    result.timeline = sorted(
        (f.published_at, f.published_at - (f.scheduled_at or 0.0))
        for f in firings
        if f.published_at is not None
    )


def count_failover(result: RunResult, firings: list[Firing]) -> None:
    """Lateness as in steady, then the takeover's figures (bench.compare.failover)."""
    from bench.compare.failover import failover_stats

    count_steady(result, firings)
    if result.victim is None or result.kill_at is None:
        return
    plan = plan_of(result)
    end = result.due_at + result.case.duration_s
    timed = [f for f in firings if f.published_at is not None and f.published_at <= end + SETTLE_S]
    stats = failover_stats(plan, timed, result.victim, result.kill_at, end, result.timeline)
    result.failover = stats
    # Both schedulers are counted here, so misses and duplicates mean the same for both.
    result.counted = True
    result.misses, result.duplicates = stats.misses, stats.duplicates
