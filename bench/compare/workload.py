"""The workloads: which cases run, with how many jobs, in quick and full mode."""

from __future__ import annotations

from dataclasses import dataclass

# Stock celery beat's only way to make N entries fire at one chosen instant is a crontab,
# whose resolution is the minute, so every case's due instant is a minute boundary.
CELERY_PEERS = ("celery-beat", "django-celery-beat", "redbeat")
# Nothing is skipped any more: RedBeat's steady burst came from fractional scores written by
# our registration (see steady.register_redbeat), now whole seconds as RedBeat writes them.
SKIPPED: set[tuple[str, str]] = set()
OURS = ("ours-1", "ours-2")
# Failover needs a second process to take over: two of our nodes, or two RedBeat beats (one
# blocked on RedBeat's lock). Stock celery beat and django-celery-beat have no takeover.
FAILOVER_CONTENDERS = ("ours-2", "redbeat")
# Both sides get the same 10 s: our lease TTL (SCHEDULER_LEASE_TTL_S, its default) and
# RedBeat's `redbeat_lock_timeout` (whose default, 5 x beat_max_loop_interval, is 25 minutes).
FAILOVER_LEASE_S = 10.0
# RedBeat's standby retries the lock every beat_max_loop_interval (celery's default 300 s);
# 5 s is django-celery-beat's default and keeps the standby's polling below the lock timeout.
REDBEAT_MAX_LOOP_S = 5.0


def skipped(scenario: str, scheduler: str) -> bool:
    if scenario == "failover":
        return scheduler not in FAILOVER_CONTENDERS
    return (scenario, scheduler) in SKIPPED


@dataclass(frozen=True)
class Case:
    """One measured run: ``registered`` jobs of which ``due`` fire at the same instant."""

    scenario: str  # "spike" or "registrations"
    registered: int
    due: int
    # Longest we wait for the last firing after the due instant before calling it a miss.
    deadline_s: float
    # Longest the scheduler may take to start before the due instant; the due instant is
    # the first minute boundary after registration + this budget.
    startup_budget_s: float
    # Fewer repetitions than the profile's for cases whose slow peers take minutes each.
    max_repetitions: int = 99
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
        return f"{self.scenario} n={self.due} registered={self.registered}"


@dataclass(frozen=True)
class Profile:
    name: str
    repetitions: int
    cases: tuple[Case, ...]


QUICK = Profile(
    name="quick",
    repetitions=1,
    cases=(
        Case("spike", registered=500, due=500, deadline_s=90, startup_budget_s=8),
        Case("registrations", registered=10_000, due=100, deadline_s=90, startup_budget_s=25),
        Case(
            "steady",
            registered=500,
            due=500,
            deadline_s=0,
            startup_budget_s=8,
            period_s=10,
            duration_s=20,
        ),
        # The kill leaves 28 s: lease expiry (10 s), takeover and catch-up, then steady again.
        Case(
            "failover",
            registered=2_000,
            due=2_000,
            deadline_s=0,
            startup_budget_s=8,
            period_s=10,
            duration_s=40,
            kill_after_s=12,
        ),
    ),
)

# The issue asks for 50,000 and 1,000,000 too; at stock celery beat's ~21 firings/s a 50,000
# spike alone takes 40 minutes per repetition, so the full profile stops at what fits a run
# of about 40 minutes; a peer still publishing at the deadline is reported as unfinished.
FULL = Profile(
    name="full",
    repetitions=3,
    cases=(
        Case("spike", registered=1_000, due=1_000, deadline_s=120, startup_budget_s=6),
        Case(
            "spike", registered=10_000, due=10_000, deadline_s=150, startup_budget_s=15,
            max_repetitions=1,
        ),
        Case(
            "registrations", registered=100_000, due=100, deadline_s=120, startup_budget_s=40,
            max_repetitions=1,
        ),
        Case(
            "steady", registered=10_000, due=10_000, deadline_s=0, startup_budget_s=15,
            period_s=10, duration_s=30, max_repetitions=1,
        ),
        Case(
            "failover", registered=10_000, due=10_000, deadline_s=0, startup_budget_s=15,
            period_s=10, duration_s=60, kill_after_s=15, max_repetitions=1,
        ),
    ),
)  # fmt: skip

PROFILES = {"quick": QUICK, "full": FULL}
