"""What a soak found: firings lost, effects repeated, attempts started after a cancel.

Pure: the harness reads the ledger and the database, this module judges them. The invariants
checked are those of docs/architecture.md, "Invariants": *nothing lost*, *no duplicate effect*
and *cancel is final*.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bench.soak.ledger import Delivery
from bench.soak.workload import FiringKey

# A firing of a job cancelled by the soak that has no run at all is excused only when it was
# due this close to the cancel (the engine might not have claimed it yet); older ones are lost.
CANCEL_CLAIM_GRACE_S = 60.0


@dataclass(frozen=True)
class RunFact:
    run_id: str
    job_id: str
    state: str
    dead_lettered: bool


@dataclass(frozen=True)
class AttemptFact:
    run_id: str
    job_id: str
    attempt: int
    worker: str  # "host:pid" of the pool process that ran it (jobs.execution.worker_name)
    outcome: str
    started_at: float | None = None  # epoch seconds


@dataclass(frozen=True)
class CancelRecord:
    """A cancel the API or a service acknowledged, and the attempts that existed right after."""

    kind: str  # "run" or "job"
    job_id: str
    run_id: str | None
    acked_at: float  # epoch seconds
    attempts_seen: frozenset[tuple[str, int]]


@dataclass(frozen=True)
class WorkerKill:
    at: float  # epoch seconds
    pids: frozenset[int]


@dataclass
class FiringCounts:
    expected: int = 0
    applied: int = 0
    dead_lettered: int = 0
    cancelled: int = 0
    missed_or_skipped: int = 0
    unfired_before_job_cancel: int = 0
    lost_by_state: Counter[str] = field(default_factory=Counter)
    lost_examples: list[FiringKey] = field(default_factory=list)
    unexpected: int = 0

    @property
    def lost(self) -> int:
        return sum(self.lost_by_state.values())


def count_firings(
    expected: Iterable[FiringKey],
    effects: Mapping[FiringKey, list[Delivery]],
    runs: Mapping[FiringKey, RunFact],
    cancelled_runs: set[str],
    job_cancels: Mapping[str, float],
    scheduled_epoch: Mapping[FiringKey, float],
) -> FiringCounts:
    """Each expected firing is applied (an effect in the ledger), dead-lettered, cancelled by
    the soak, recorded as missed or skipped, or lost; effects of firings no schedule defines
    are *unexpected*."""
    counts = FiringCounts()
    wanted = set(expected)
    counts.expected = len(wanted)
    for key in sorted(wanted):
        run = runs.get(key)
        job_id = key[0]
        if key in effects:
            counts.applied += 1
        elif run is not None and run.dead_lettered:
            counts.dead_lettered += 1
        elif (
            run is not None
            and run.state == "cancelled"
            and (run.run_id in cancelled_runs or job_id in job_cancels)
        ):
            counts.cancelled += 1
        elif run is not None and run.state in ("missed", "skipped"):
            counts.missed_or_skipped += 1
        elif (
            run is None
            and job_id in job_cancels
            and scheduled_epoch[key] >= job_cancels[job_id] - CANCEL_CLAIM_GRACE_S
        ):
            counts.unfired_before_job_cancel += 1
        else:
            state = run.state if run is not None else "no run"
            counts.lost_by_state[state] += 1
            # A few of each kind: the states tell apart a backlog, a stuck run and a lost one.
            if counts.lost_by_state[state] <= 3:
                counts.lost_examples.append(key)
    counts.unexpected = sum(1 for key in effects if key not in wanted)
    return counts


@dataclass
class Repeats:
    """Firings whose target saw more than one effect."""

    critical_keys: int = 0
    duplicate_effects: int = 0  # critical, not explained by a SIGKILL: fails the soak
    explained: int = 0  # critical, the earlier effect's worker was SIGKILLed before recording it
    other_keys: int = 0
    other_unexplained: int = 0
    examples: list[FiringKey] = field(default_factory=list)


def _pid(worker: str) -> int | None:
    tail = worker.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def explained_by_kill(
    earlier: Delivery,
    later: Delivery,
    attempts: Mapping[tuple[str, int], AttemptFact],
    kills: list[WorkerKill],
) -> bool:
    """Whether ``later`` repeats ``earlier`` only because the process that sent ``earlier``
    was SIGKILLed before it could record the outcome (at-least-once for HTTP). The kill may
    come before the target received the request: a request on the wire is still served.

    Never explained: the same attempt delivering twice, or an earlier attempt that recorded
    success (then the key was done and nothing may run the target again)."""
    if (earlier.run_id, earlier.attempt) == (later.run_id, later.attempt):
        return False
    fact = attempts.get((earlier.run_id, earlier.attempt))
    if fact is None or fact.outcome == "succeeded":
        return False
    pid = _pid(fact.worker)
    sent = fact.started_at if fact.started_at is not None else earlier.at
    return any(pid in kill.pids and kill.at >= sent for kill in kills)


def count_repeats(
    effects: Mapping[FiringKey, list[Delivery]],
    critical_jobs: set[str],
    attempts: Mapping[tuple[str, int], AttemptFact],
    kills: list[WorkerKill],
) -> Repeats:
    repeats = Repeats()
    for key, delivered in effects.items():
        if len(delivered) < 2:
            continue
        critical = key[0] in critical_jobs
        unexplained = sum(
            1
            for earlier, later in itertools.pairwise(delivered)
            if not explained_by_kill(earlier, later, attempts, kills)
        )
        if critical:
            repeats.critical_keys += 1
            repeats.duplicate_effects += unexplained
            repeats.explained += len(delivered) - 1 - unexplained
            if unexplained and len(repeats.examples) < 10:
                repeats.examples.append(key)
        else:
            repeats.other_keys += 1
            repeats.other_unexplained += unexplained
    return repeats


def attempts_after_cancel(
    cancels: Iterable[CancelRecord], attempts: Iterable[AttemptFact]
) -> list[AttemptFact]:
    """Attempts that did not exist when a cancel of their run (or of their job) was
    acknowledged: *cancel is final* says none may start."""
    by_run: dict[str, list[AttemptFact]] = defaultdict(list)
    by_job: dict[str, list[AttemptFact]] = defaultdict(list)
    for fact in attempts:
        by_run[fact.run_id].append(fact)
        by_job[fact.job_id].append(fact)
    found: dict[tuple[str, int], AttemptFact] = {}
    for cancel in cancels:
        covered = by_run[cancel.run_id or ""] if cancel.kind == "run" else by_job[cancel.job_id]
        for fact in covered:
            if (fact.run_id, fact.attempt) not in cancel.attempts_seen:
                found[(fact.run_id, fact.attempt)] = fact
    return sorted(found.values(), key=lambda f: (f.run_id, f.attempt))


def spread(values: Iterable[float]) -> tuple[float, float, float] | None:
    """p50, p99 and max (nearest rank), or None without values."""
    ordered = sorted(values)
    if not ordered:
        return None

    def rank(q: float) -> float:
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)]

    return rank(0.50), rank(0.99), ordered[-1]


def lateness_by_cause(
    lateness: Iterable[tuple[float, float]],
    outages: Iterable[tuple[str, float, float]],
    after_s: float,
) -> dict[str, tuple[float, float, float] | None]:
    """Spread of (scheduled epoch, lateness) pairs, split by the fault their firing was due in
    (from the victim going down until ``after_s`` past its return; the latest fault when
    several overlap), or "no fault"."""
    windows = sorted(outages, key=lambda o: o[1], reverse=True)
    found: dict[str, list[float]] = defaultdict(list)
    for scheduled, late in lateness:
        cause = next(
            (kind for kind, down, up in windows if down <= scheduled <= up + after_s), "no fault"
        )
        found[cause].append(late)
    return {cause: spread(values) for cause, values in sorted(found.items())}
