"""The soak's jobs and the firings their schedules define, computed on their own.

Pure. The expected firings are plain interval arithmetic (``anchor + k * interval``), not the
engine's schedule code, so a bug there shows up as lost or unexpected firings instead of being
agreed with.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# Target paths of the soak's HTTP server (bench/soak/target.py) and their share of the jobs.
PATH_WEIGHTS = {
    "/ok": 0.905,  # answers 200 at once
    "/flaky": 0.08,  # 503 on the first attempt, 200 on the next: a retry timer
    # Answers 200 after SLOW_S: long enough to be cancelled or killed mid-run, rare enough not
    # to hold many of the workers' processes.
    "/slow": 0.005,
    "/fail": 0.01,  # always 500: dead-lettered after its attempts
}
SLOW_S = 1.5
CRITICAL_SHARE = 0.3
INTERVALS_S = (5, 10, 20, 30)

# (job id, scheduled_for as UTC ISO with microseconds): one logical firing.
FiringKey = tuple[str, str]


@dataclass(frozen=True)
class JobPlan:
    name: str
    interval_s: int
    offset_ms: int  # first firing at the soak's start + offset
    path: str
    critical: bool


def workload(rate: float, seed: int) -> list[JobPlan]:
    """Interval jobs firing ``rate`` times per second in total, evenly spread over time.

    The rate is split equally over INTERVALS_S; within one interval the jobs' first firings are
    evenly spaced over the interval, so every second carries about the same load.
    """
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = random.Random(seed)
    paths, weights = list(PATH_WEIGHTS), list(PATH_WEIGHTS.values())
    jobs = []
    for interval in INTERVALS_S:
        count = max(1, round(rate / len(INTERVALS_S) * interval))
        for i in range(count):
            jobs.append(
                JobPlan(
                    name=f"soak-{interval}s-{i:05d}",
                    interval_s=interval,
                    offset_ms=i * interval * 1000 // count,
                    path=rng.choices(paths, weights)[0],
                    critical=rng.random() < CRITICAL_SHARE,
                )
            )
    return jobs


def firing_rate(jobs: list[JobPlan]) -> float:
    return sum(1 / job.interval_s for job in jobs)


def expected_firings(
    anchor: datetime, interval: timedelta, start: datetime, end: datetime
) -> Iterator[datetime]:
    """``anchor + k * interval`` (k >= 0) within [start, end], ascending."""
    if interval <= timedelta(0):
        raise ValueError("interval must be positive")
    k = 0 if start <= anchor else -((anchor - start) // interval)
    fire = anchor + k * interval
    while fire <= end:
        yield fire
        fire += interval


def firing_key(job_id: object, scheduled_for: datetime | str) -> FiringKey:
    """The key of one firing, the same whether it comes from a header or from a row."""
    if isinstance(scheduled_for, str):
        scheduled_for = datetime.fromisoformat(scheduled_for)
    if scheduled_for.tzinfo is None:
        raise ValueError("scheduled_for must be aware")
    return str(job_id), scheduled_for.astimezone(UTC).isoformat(timespec="microseconds")
