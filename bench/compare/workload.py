"""The workloads: which cases run, with how many jobs, in quick and full mode."""

from __future__ import annotations

import os
from dataclasses import dataclass

CELERY_PEERS = ("celery-beat", "django-celery-beat", "redbeat")
# The peers that compare their whole schedule on every tick (celery's Scheduler.tick calls
# schedules_equal) and so reach only ~20 firings/s with 10,000 entries: their large cases run
# into the deadline every time, so they repeat less often (slow_peer_repetitions).
SLOW_PEERS = ("celery-beat", "django-celery-beat")
# Nothing is skipped any more: RedBeat's steady burst came from fractional scores written by
# our registration (see steady.register_redbeat), now whole seconds as RedBeat writes them.
SKIPPED: set[tuple[str, str]] = set()
OURS = ("ours-1", "ours-2")
# Failover needs a second process to take over: two of our nodes, or two RedBeat beats (one
# blocked on RedBeat's lock). Stock celery beat and django-celery-beat have no takeover.
FAILOVER_CONTENDERS = ("ours-2", "redbeat")
# Both sides get the same 10 s: our lease TTL (SCHEDULER_LEASE_TTL_S, its default) and
# RedBeat's `redbeat_lock_timeout` (whose default, 5 x beat_max_loop_interval, is 25 minutes).
# BENCH_FAILOVER_LEASE_S changes it for both, e.g. 3 for a short-lease run.
FAILOVER_LEASE_S = float(os.environ.get("BENCH_FAILOVER_LEASE_S") or 10.0)
# Our renewal period under that TTL: the default 3 s, at most a third of the TTL.
FAILOVER_RENEW_S = min(3.0, FAILOVER_LEASE_S / 3)
# RedBeat's standby retries the lock every beat_max_loop_interval (celery's default 300 s),
# and the holder extends its lock only once per tick, sleeping up to that interval between
# ticks: it must stay below the lock timeout, or an idle holder's lock lapses in its sleep, the
# standby takes it and the holder's next extend raises LockNotOwnedError (a 5 s interval under
# a 3 s lock made every short-lease run end that way before the kill). 5 s (django-celery-beat's
# default) under the default 10 s; under a shorter lock, our renewal period (a third of it).
REDBEAT_MAX_LOOP_S = 5.0 if FAILOVER_LEASE_S >= 10 else FAILOVER_RENEW_S
# End to end (bench.compare.e2e): one scheduler process each, ours against RedBeat driving a
# plain Celery task, executed by the same workers: E2E_WORKERS prefork workers of
# E2E_CONCURRENCY processes each, sized for 2 cores (16 calls in flight keep a 20 ms target
# busy at up to 800 calls/s while leaving the cores to the schedulers, workers and databases).
E2E_CONTENDERS = ("ours-1", "redbeat")
E2E_WORKERS = 2
E2E_CONCURRENCY = int(os.environ.get("BENCH_E2E_CONCURRENCY") or 8)
# The target answers every call after this long.
E2E_TARGET_DELAY_S = 0.020


def skipped(scenario: str, scheduler: str) -> bool:
    if scenario == "failover":
        return scheduler not in FAILOVER_CONTENDERS
    if scenario == "e2e":
        return scheduler not in E2E_CONTENDERS
    return (scenario, scheduler) in SKIPPED


@dataclass(frozen=True)
class Case:
    """One measured run: ``registered`` jobs of which ``due`` fire at the same instant."""

    scenario: str  # "spike", "registrations", "steady", "failover" or "e2e"
    registered: int
    due: int
    # Longest we wait for the last firing after the due instant; what is still unpublished
    # then is reported as unfinished (75 s is enough to measure "within 60 s").
    deadline_s: float
    # Longest the scheduler may take to start: the due instant is registration's expected
    # end plus this budget (see timing.due_instant).
    startup_budget_s: float
    # Fewer repetitions than the profile's, for every scheduler or only for SLOW_PEERS.
    max_repetitions: int = 99
    slow_peer_repetitions: int = 99
    # A scheduler that has not started (first tick / first lease) this long after its spawn
    # is stopped and reported as not started, rather than waited for until the deadline.
    startup_cap_s: float = 0.0  # 0: no cap but the deadline
    # Steady only: ``due`` interval jobs of this period, measured for ``duration_s``.
    period_s: int = 0
    duration_s: float = 0.0
    # Failover only: seconds after the first due instant at which the holder is killed.
    kill_after_s: float = 0.0

    @property
    def label(self) -> str:
        if self.scenario == "failover":
            rate = self.due // self.period_s
            return f"failover {rate}/s for {self.duration_s:.0f}s, kill at {self.kill_after_s:.0f}s"
        if self.scenario == "steady":
            return f"steady {self.due // self.period_s}/s for {self.duration_s:.0f}s"
        if self.scenario == "e2e":
            return f"e2e n={self.due} http"
        return f"{self.scenario} n={self.due} registered={self.registered}"


@dataclass(frozen=True)
class Profile:
    name: str
    repetitions: int
    cases: tuple[Case, ...]


def repetitions_for(profile: Profile, case: Case, scheduler: str) -> int:
    """How many times ``scheduler`` runs ``case`` in ``profile``."""
    limit = case.slow_peer_repetitions if scheduler in SLOW_PEERS else case.max_repetitions
    return min(profile.repetitions, case.max_repetitions, limit)


# CI-sized, under 5 minutes on 2 cores: each scenario's code path once per scheduler. The
# spike has idle entries besides its due ones, so it also covers what the registrations
# scenario runs (which differs from a spike only in its sizes and start-up cap).
QUICK = Profile(
    name="quick",
    repetitions=1,
    cases=(
        Case("spike", registered=5_000, due=500, deadline_s=60, startup_budget_s=4),
        Case(
            "steady", registered=500, due=500, deadline_s=0, startup_budget_s=4,
            period_s=5, duration_s=10,
        ),
        # The kill leaves 36 s: lease expiry (10 s), takeover (which sends what the killed node
        # claimed but had not published) and catch-up, then a steady stretch after it.
        Case(
            "failover", registered=2_000, due=2_000, deadline_s=0, startup_budget_s=4,
            period_s=10, duration_s=42, kill_after_s=6,
        ),
        # End to end at CI size: the full case's path (target, workers, counting at the
        # target) in about 25 s per scheduler.
        Case("e2e", registered=1_000, due=1_000, deadline_s=60, startup_budget_s=8),
    ),
)  # fmt: skip

# The full profile's sizes (the scheduler's design scale), in at most ~72 minutes on a
# 2-core machine (timing.expected_duration_s prints the estimate at start): celery beat and
# django-celery-beat are cut off at the deadline in the large cases and repeat twice there;
# every other figure is the median of 3.
FULL = Profile(
    name="full",
    repetitions=3,
    cases=(
        Case("spike", registered=1_000, due=1_000, deadline_s=75, startup_budget_s=6),
        Case(
            "spike", registered=10_000, due=10_000, deadline_s=75, startup_budget_s=8,
            slow_peer_repetitions=2,
        ),
        # 22 s: one of our nodes claims a spike ahead at about 3,600 firings/s, so 50,000 take
        # it about 14 s; with 15 s the last few thousand were claimed at the instant in 2 of 6
        # runs, which measures a node started just before its spike. The claim-ahead window
        # opens 20 s before the instant, so a longer budget would add nothing.
        Case(
            "spike", registered=50_000, due=50_000, deadline_s=75, startup_budget_s=22,
            slow_peer_repetitions=2,
        ),
        Case(
            "registrations", registered=1_000_000, due=1_000, deadline_s=75,
            startup_budget_s=45, startup_cap_s=120, max_repetitions=2,
        ),
        Case(
            "steady", registered=10_000, due=10_000, deadline_s=0, startup_budget_s=10,
            period_s=10, duration_s=60, slow_peer_repetitions=2,
        ),
        Case(
            "failover", registered=10_000, due=10_000, deadline_s=0, startup_budget_s=10,
            period_s=10, duration_s=60, kill_after_s=20,
        ),
        # Every firing executed by workers against a 20 ms HTTP target, once per scheduler:
        # minutes per run, so not repeated.
        Case(
            "e2e", registered=50_000, due=50_000, deadline_s=900, startup_budget_s=15,
            max_repetitions=1,
        ),
    ),
)  # fmt: skip

PROFILES = {"quick": QUICK, "full": FULL}
