"""Names of the engine's counters, bumped once per batch in the shared Redis hash."""

from __future__ import annotations

from jobs.metrics import counter_inc

FIRINGS_CLAIMED = "scheduler_firings_claimed_total"
FIRINGS_MISSED = "scheduler_firings_missed_total"
RUNS_PUBLISHED = "scheduler_runs_published_total"
RUNS_REPUBLISHED = "scheduler_runs_republished_total"
TIMERS_FIRED = "scheduler_timers_fired_total"
RUNS_REAPED = "scheduler_runs_reaped_total"
RUNS_DEAD = "scheduler_dead_letters_total"
FENCED = "scheduler_fenced_out_total"
LEASES_ACQUIRED = "scheduler_partition_leases_acquired_total"
LEASES_LOST = "scheduler_partition_leases_lost_total"
ENGINE_ERRORS = "scheduler_engine_errors_total"
DEAD_LETTER_NOTICES_DROPPED = "scheduler_dead_letter_notices_dropped_total"


def count(name: str, amount: int = 1) -> None:
    if amount:
        counter_inc(name, amount)
