"""The soak's two profiles: the full one for docs/benchmarks.md and a short one for CI."""

from __future__ import annotations

from dataclasses import dataclass, replace

from bench.soak.plan import FaultKind, FaultRule


@dataclass(frozen=True)
class Profile:
    name: str
    minutes: float  # firings are counted from the first one over this window
    rate: float  # firings per second, all jobs together
    rules: dict[FaultKind, FaultRule]
    cancel_every_s: float  # one run cancelled at random this often
    job_cancel_every_s: float  # one job deleted at random this often
    drain_s: float  # after the window, how long the runs get to finish (no faults)
    warmup_s: float = 15.0  # no fault before this many seconds into the window
    quiet_s: float = 25.0  # nor in the window's last seconds: every victim is back by then
    beat_nodes: int = 2
    workers: int = 2
    concurrency: int = 6

    @property
    def window_s(self) -> float:
        return self.minutes * 60


def _rules(beat_gap: float, worker_gap: float, redis_gap: float) -> dict[FaultKind, FaultRule]:
    return {
        FaultKind.BEAT_KILL: FaultRule(beat_gap, down_s=(1.0, 8.0), targets=2),
        FaultKind.WORKER_KILL: FaultRule(worker_gap, down_s=(1.0, 8.0), targets=2),
        FaultKind.REDIS_RESTART: FaultRule(redis_gap, down_s=(0.5, 4.0), targets=1),
    }


FULL = Profile(
    name="full",
    minutes=30,
    rate=200,
    rules=_rules(beat_gap=180, worker_gap=120, redis_gap=300),
    cancel_every_s=3,
    job_cancel_every_s=90,
    drain_s=240,
)
# About two minutes of firings: still one kill of each kind and one Redis restart.
QUICK = Profile(
    name="quick",
    minutes=2,
    rate=40,
    rules=_rules(beat_gap=80, worker_gap=40, redis_gap=80),
    cancel_every_s=2,
    job_cancel_every_s=30,
    drain_s=120,
)


def chosen(quick: bool, minutes: float | None, rate: float | None) -> Profile:
    profile = QUICK if quick else FULL
    if minutes is not None:
        profile = replace(profile, minutes=minutes)
    if rate is not None:
        profile = replace(profile, rate=rate)
    return profile
