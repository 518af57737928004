"""Failover: kill -9 the process holding the work mid-run, then measure the takeover.

Everything here but ``kill_victim`` is arithmetic on publish timestamps, so it is unit-tested.

* *Resume*: kill until the first publish, after the kill, of a firing of the killed process's
  work (ours: jobs in the partitions it leased; RedBeat: every entry, one beat runs them all).
* *Misses* and *duplicates*, ours: against the anchored grid (every ``first_due + k * period``
  before the end); the survivor replays the firings missed while the lease ran out
  (``catchup_policy=replay_all``). RedBeat: its intervals re-anchor at each send, so a firing
  is owed per period elapsed since the previous send of that entry; a gap of ``g`` between two
  sends holds ``floor(g / period)`` due instants, the last of which the later send serves, so
  ``floor(g / period) - 1`` were missed. Sends less than half a period apart are duplicates.
* *Lateness after the kill*: of every firing published after the kill (catch-up included), and
  *settled*: of those published more than one period after firings resumed.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from bench.compare.contender import Contender, Firing, Victim
from bench.compare.metrics import percentile
from bench.compare.steady import SteadyPlan, entry_name

# Firings due this close to the end may still be in flight when the schedulers are stopped.
IN_FLIGHT_S = 2.0


@dataclass
class FailoverStats:
    kill_at: float  # wall clock of the SIGKILL, relative times below are from it
    victim_share: float
    resume_s: float | None = None
    misses: int = 0
    duplicates: int = 0
    lateness_p99_after: float | None = None
    lateness_max_after: float | None = None
    lateness_p99_settled: float | None = None


def kill_victim(
    contender: Contender, procs: list[subprocess.Popen[bytes]], out_dir: Path, env: dict[str, str]
) -> tuple[Victim, float] | None:
    victim = contender.victim(out_dir, env)
    if victim is None:
        return None
    os.kill(procs[victim.index].pid, signal.SIGKILL)
    return victim, time.time()


def resume_after(kill_at: float, published: list[float]) -> float | None:
    """Seconds from the kill to the first publish after it (None: nothing resumed)."""
    after = [at for at in published if at > kill_at]
    return min(after) - kill_at if after else None


def gap_counts(
    first_due: float, sends: list[float], period: float, until: float
) -> tuple[int, int]:
    """(misses, duplicates) of one re-anchoring interval entry (see the module docstring)."""
    misses = duplicates = 0
    previous = first_due - period
    for at in sorted(sends):
        gap = at - previous
        if gap < period / 2:
            duplicates += 1
            continue
        misses += max(0, math.floor(gap / period) - 1)
        previous = at
    # Instants owed after the last send and before the end went unserved.
    misses += max(0, math.floor((until - previous) / period))
    return misses, duplicates


def anchored_counts(plan: SteadyPlan, firings: list[Firing], until: float) -> tuple[int, int]:
    """(misses, duplicates) of our anchored firings against the grid due before ``until``."""
    seen: dict[tuple[str, float], int] = defaultdict(int)
    for f in firings:
        seen[(f.name, round(f.scheduled_at or 0.0, 3))] += 1
    duplicates = sum(n - 1 for n in seen.values() if n > 1)
    misses = 0
    for i in range(plan.entries):
        at = plan.first_due(i)
        while at < until:
            misses += (entry_name(i), round(at, 3)) not in seen
            at += plan.period_s
    return misses, duplicates


def lateness_stats(
    timeline: list[tuple[float, float]], kill_at: float, resume_s: float | None, period: float
) -> tuple[float | None, float | None, float | None]:
    """(p99, max) of lateness published after the kill, and p99 once settled."""
    after = sorted(late for at, late in timeline if at > kill_at)
    settled_from = kill_at + (resume_s or 0.0) + period
    settled = sorted(late for at, late in timeline if at > settled_from)
    return (
        percentile(after, 0.99) if after else None,
        after[-1] if after else None,
        percentile(settled, 0.99) if settled else None,
    )


def failover_stats(
    plan: SteadyPlan,
    firings: list[Firing],
    victim: Victim,
    kill_at: float,
    end: float,
    timeline: list[tuple[float, float]],
) -> FailoverStats:
    """Every failover figure from the timed firings of one run."""
    stats = FailoverStats(kill_at, victim.share)
    held = [
        f.published_at
        for f in firings
        if f.published_at is not None
        and (victim.partitions is None or f.partition in victim.partitions)
    ]
    stats.resume_s = resume_after(kill_at, held)
    until = end - IN_FLIGHT_S
    if firings and all(f.scheduled_at is not None for f in firings):
        stats.misses, stats.duplicates = anchored_counts(plan, firings, until)
    else:
        sends: dict[str, list[float]] = defaultdict(list)
        for f in firings:
            if f.published_at is not None:
                sends[f.name].append(f.published_at)
        for i in range(plan.entries):
            missed, dup = gap_counts(plan.first_due(i), sends[entry_name(i)], plan.period_s, until)
            stats.misses += missed
            stats.duplicates += dup
    p99, worst, settled = lateness_stats(timeline, kill_at, stats.resume_s, plan.period_s)
    stats.lateness_p99_after, stats.lateness_max_after, stats.lateness_p99_settled = (
        p99,
        worst,
        settled,
    )
    return stats
