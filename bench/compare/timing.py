"""How long runs take: the due instant's lead after registration, and a profile's wall time."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from bench.compare.workload import Case, Profile, repetitions_for, skipped

# Rows per second each registration path reaches on the 2-core reference machine, halved so
# the due instant is rarely reached before the scheduler has started: bulk SQL from a
# template row (ours, django-celery-beat), pipelined HSET/ZADD (RedBeat). celery beat has no
# separate registration: its beat_schedule is built inside the beat process, so the start-up
# budget covers it.
REGISTER_ROWS_PER_S = {"ours": 25_000.0, "django-celery-beat": 30_000.0, "redbeat": 40_000.0}
# A registration subprocess starts Python (and Django) before writing anything.
REGISTER_FIXED_S = 3.0
# Spawn-to-stop costs of one run besides its wait: settle, SIGTERM, reading the queues.
RUN_FIXED_S = 4.0
# Expected spike rates, for the estimate only: min(cap, per_tick / registered). celery beat
# and django-celery-beat compare their whole schedule on every tick (Scheduler.tick calls
# schedules_equal), one message per tick, so their rate falls as 1 / registered.
SPIKE_RATE_CAP = {
    "ours-1": 5_000.0,
    "ours-2": 6_000.0,
    "celery-beat": 400.0,
    "django-celery-beat": 120.0,
    "redbeat": 900.0,
}
# End to end: executions per second with E2E_WORKERS x E2E_CONCURRENCY processes, as
# measured at 1,000 firings on a busy 2-core host (about 50 and 125), rounded up.
E2E_RATE = {"ours-1": 100.0, "redbeat": 250.0}
SPIKE_PER_TICK = {"celery-beat": 500_000.0, "django-celery-beat": 200_000.0}


def register_kind(scheduler: str) -> str:
    return "ours" if scheduler.startswith("ours") else scheduler


def registration_estimate_s(scheduler: str, case: Case) -> float:
    """Expected registration time, generous: the due instant is aimed past it."""
    rate = REGISTER_ROWS_PER_S.get(register_kind(scheduler))
    if rate is None:
        return 0.0
    rows = case.due if case.scenario in ("steady", "failover") else case.registered
    return REGISTER_FIXED_S + rows / rate


def due_instant(registration_start_s: float, scheduler: str, case: Case) -> float:
    """The due instant, in whole epoch seconds: registration's expected end plus the case's
    start-up budget. Interval schedules take any instant, so no minute boundary to wait for;
    whole seconds because RedBeat scores its entries in whole seconds."""
    lead_s = registration_estimate_s(scheduler, case) + case.startup_budget_s
    return float(math.ceil(registration_start_s + lead_s))


def wait_estimate_s(scheduler: str, case: Case) -> float:
    """Expected seconds from the due instant to the end of the run."""
    if case.scenario in ("steady", "failover"):
        return case.duration_s
    if case.scenario == "e2e":
        return min(case.deadline_s, case.due / E2E_RATE.get(scheduler, 300.0))
    rate = SPIKE_RATE_CAP.get(scheduler, 1_000.0)
    per_tick = SPIKE_PER_TICK.get(scheduler)
    if per_tick is not None:
        rate = min(rate, per_tick / case.registered)
    return min(case.deadline_s, case.due / rate)


def run_estimate_s(scheduler: str, case: Case) -> float:
    return (
        registration_estimate_s(scheduler, case)
        + case.startup_budget_s
        + wait_estimate_s(scheduler, case)
        + RUN_FIXED_S
    )


@dataclass(frozen=True)
class PlannedRun:
    scheduler: str
    case: Case
    repetition: int


def planned_runs(
    profile: Profile, schedulers: Iterable[str], scenarios: Iterable[str] | None = None
) -> list[PlannedRun]:
    """Every run of a profile, in the order they run: repetition outermost and schedulers
    innermost, so each pair compared is measured minutes apart, not a whole profile apart,
    and drift on a shared machine hits both alike."""
    names = list(schedulers)
    wanted = set(scenarios) if scenarios else None
    runs = []
    for repetition in range(profile.repetitions):
        for case in profile.cases:
            if wanted is not None and case.scenario not in wanted:
                continue
            for name in names:
                if not skipped(case.scenario, name) and repetition < repetitions_for(
                    profile, case, name
                ):
                    runs.append(PlannedRun(name, case, repetition))
    return runs


def expected_duration_s(runs: Iterable[PlannedRun], setup_s: float = 30.0) -> float:
    """Expected wall time of the runs, plus ``setup_s`` for services and migrations."""
    return setup_s + sum(run_estimate_s(run.scheduler, run.case) for run in runs)
