"""Catch-up after an outage: which due firings run now and which are recorded as missed."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from beat_engine.schedules import ScheduleSpec, count_fires, last_fires, next_fire_after

# The due firings are `first_due` (the job's stored next_fire_at) and every later firing up to
# and including `now`. A firing is on time while now - scheduled_for <= starting_deadline
# (no deadline: always on time). Under every policy the runs are the newest due firings and
# everything older is recorded as missed, so a plan is "the last r firings run, the rest missed":
#
# * SKIP: only the latest due firing runs, and only if it is on time; the rest are missed.
# * RUN_ONCE: the latest due firing runs even when it is past its deadline; the rest are missed.
# * REPLAY_ALL: every on-time firing runs, oldest first, but at most `limit` of them (the newest,
#   as Kubernetes CronJob bounds at 100); older and late firings are missed.
#
# Counting never lists the firings: an every-second job down for a month has millions of them.


class CatchUpPolicy(StrEnum):
    SKIP = "skip"
    RUN_ONCE = "run_once"
    REPLAY_ALL = "replay_all"


@dataclass(frozen=True)
class CatchUpPlan:
    run: tuple[datetime, ...]  # scheduled_for instants to create runs for, ascending
    missed: tuple[datetime, ...]  # the newest missed instants to record, ascending
    missed_count: int  # every missed firing, including those not listed in `missed`
    next_fire_at: datetime | None  # the first firing strictly after now


def plan_catch_up(
    spec: ScheduleSpec,
    *,
    first_due: datetime,
    now: datetime,
    policy: CatchUpPolicy,
    starting_deadline: timedelta | None,
    limit: int = 100,
    missed_record_limit: int = 1000,
) -> CatchUpPlan:
    _check_arguments(first_due, now, starting_deadline, limit, missed_record_limit)
    first_due, now = first_due.astimezone(UTC), now.astimezone(UTC)
    if first_due > now:
        return CatchUpPlan(run=(), missed=(), missed_count=0, next_fire_at=first_due)
    later = count_fires(spec, first_due, now)
    runnable = limit if policy == CatchUpPolicy.REPLAY_ALL else 1
    # Only the newest firings can be run or listed, so only they are materialised.
    wanted = runnable + missed_record_limit
    tail = last_fires(spec, first_due, now, wanted)
    if later < wanted:
        tail.insert(0, first_due)
    on_time = len(tail)
    if starting_deadline is not None:
        on_time -= bisect_left(tail, now - starting_deadline)
    if policy == CatchUpPolicy.RUN_ONCE:
        ran = 1
    elif policy == CatchUpPolicy.SKIP:
        ran = min(1, on_time)
    else:
        ran = min(limit, on_time)
    split = len(tail) - ran
    return CatchUpPlan(
        run=tuple(tail[split:]),
        missed=tuple(tail[max(0, split - missed_record_limit) : split]),
        missed_count=1 + later - ran,
        next_fire_at=next_fire_after(spec, now),
    )


def _check_arguments(
    first_due: datetime,
    now: datetime,
    starting_deadline: timedelta | None,
    limit: int,
    missed_record_limit: int,
) -> None:
    if first_due.utcoffset() is None or now.utcoffset() is None:
        raise ValueError("first_due and now must be timezone-aware")
    if starting_deadline is not None and starting_deadline < timedelta(0):
        raise ValueError(f"starting_deadline must not be negative, got {starting_deadline}")
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    if missed_record_limit < 0:
        raise ValueError(f"missed_record_limit must not be negative, got {missed_record_limit}")
