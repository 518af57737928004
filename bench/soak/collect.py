"""After the soak: read the ledger and the database, and judge them (bench/soak/accounting.py)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.soak.accounting import (
    AttemptFact,
    FiringCounts,
    Repeats,
    RunFact,
    attempts_after_cancel,
    count_firings,
    count_repeats,
    lateness_by_cause,
    spread,
)
from bench.soak.cancels import Canceller
from bench.soak.ledger import Delivery, effects_by_key, parse_ledger
from bench.soak.seeding import SeededJob
from bench.soak.timeline import Observed
from bench.soak.workload import FiringKey, expected_firings, firing_key

# A firing due this long after a victim came back still counts as due during that fault: a
# beat node's partitions wait for their lease (10 s) to expire before another node takes them.
FAULT_AFTER_S = 15.0
RUNS_SQL = """
SELECT r.id::text, r.job_id::text, r.scheduled_for, r.state, d.id IS NOT NULL,
       extract(epoch FROM r.lateness)
  FROM jobs_jobrun r LEFT JOIN jobs_deadletter d ON d.run_id = r.id
 WHERE r.tenant_id = %s
"""
ATTEMPTS_SQL = """
SELECT a.run_id::text, r.job_id::text, a.attempt, a.worker, a.outcome,
       extract(epoch FROM a.started_at - r.scheduled_for), r.scheduled_for,
       extract(epoch FROM a.started_at)
  FROM jobs_runattempt a JOIN jobs_jobrun r ON r.id = a.run_id
 WHERE r.tenant_id = %s
"""


@dataclass
class Findings:
    firings: FiringCounts
    repeats: Repeats
    after_cancel: list[AttemptFact]
    deliveries: int
    unreadable_lines: int
    runs_by_state: Counter[str]
    extra_runs_per_firing: int  # more than one run row for one (job, scheduled_for)
    publish_lateness: tuple[float, float, float] | None
    # First-publish lateness of firings due during each kind of fault, and of the others.
    lateness_by_cause: dict[str, tuple[float, float, float] | None]
    start_lateness: tuple[float, float, float] | None
    attempts: int
    cancel_kinds: Counter[str] = field(default_factory=Counter)
    # For each example of a failure: the run and its attempts, to read next to the logs.
    details: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.firings.lost or self.repeats.duplicate_effects or self.after_cancel)


def _expected(
    jobs: list[SeededJob], start: datetime, cut: datetime, job_cancels: dict[str, float]
) -> dict[FiringKey, float]:
    wanted: dict[FiringKey, float] = {}
    for job in jobs:
        end = cut
        if job.job_id in job_cancels:
            end = min(cut, datetime.fromtimestamp(job_cancels[job.job_id], UTC))
        for fire in expected_firings(job.anchor, job.interval, start, end):
            wanted[firing_key(job.job_id, fire)] = fire.timestamp()
    return wanted


def collect(
    *,
    ledger: Path,
    jobs: list[SeededJob],
    tenant_id: int,
    start: datetime,
    cut: datetime,
    canceller: Canceller,
    observed: Observed,
) -> Findings:
    from django.db import connection

    deliveries, unreadable = parse_ledger(ledger.read_text(errors="replace").splitlines())
    window = [d for d in deliveries if datetime.fromisoformat(d.scheduled_for) <= cut]
    effects = effects_by_key(window)
    job_cancels = canceller.job_cancels
    expected = _expected(jobs, start, cut, job_cancels)

    runs: dict[FiringKey, RunFact] = {}
    by_state: Counter[str] = Counter()
    extra_runs = 0
    publish_late = []
    with connection.cursor() as cursor:
        cursor.execute(RUNS_SQL, [tenant_id])
        for run_id, job_id, scheduled, state, dead, lateness in cursor.fetchall():
            # Every trigger: a firing a beat outage delayed is a catch_up run of the same instant.
            if scheduled > cut:
                continue
            key = firing_key(job_id, scheduled)
            by_state[state] += 1
            extra_runs += key in runs
            runs[key] = RunFact(run_id, job_id, state, bool(dead))
            if lateness is not None:
                publish_late.append((scheduled.timestamp(), float(lateness)))
        cursor.execute(ATTEMPTS_SQL, [tenant_id])
        attempt_rows = cursor.fetchall()
    attempts: dict[tuple[str, int], AttemptFact] = {}
    first_start: dict[str, float] = {}
    for run_id, job_id, attempt, worker, outcome, late, scheduled, started in attempt_rows:
        attempts[(run_id, int(attempt))] = AttemptFact(
            run_id, job_id, int(attempt), worker, outcome,
            float(started) if started is not None else None,
        )  # fmt: skip
        if late is not None and scheduled <= cut:
            first_start[run_id] = min(float(late), first_start.get(run_id, float("inf")))

    critical = {job.job_id for job in jobs if job.critical}
    findings = Findings(
        firings=count_firings(
            expected, effects, runs, canceller.cancelled_runs, job_cancels, expected
        ),
        repeats=count_repeats(effects, critical, attempts, observed.kills),
        after_cancel=attempts_after_cancel(canceller.records, attempts.values()),
        deliveries=len(window),
        unreadable_lines=unreadable,
        runs_by_state=by_state,
        extra_runs_per_firing=extra_runs,
        publish_lateness=spread(late for _, late in publish_late),
        lateness_by_cause=lateness_by_cause(publish_late, observed.outages, FAULT_AFTER_S),
        start_lateness=spread(first_start.values()),
        attempts=len(attempts),
        cancel_kinds=Counter(record.kind for record in canceller.records),
    )
    findings.details = _details(findings, runs, attempts, effects)
    return findings


def _details(
    findings: Findings,
    runs: dict[FiringKey, RunFact],
    attempts: dict[tuple[str, int], AttemptFact],
    effects: dict[FiringKey, list[Delivery]],
) -> list[str]:
    by_run: dict[str, list[AttemptFact]] = {}
    for fact in attempts.values():
        by_run.setdefault(fact.run_id, []).append(fact)
    keys = [("lost", k) for k in findings.firings.lost_examples]
    keys += [("duplicate effect", k) for k in findings.repeats.examples]
    lines = []
    for label, key in keys:
        run = runs.get(key)
        lines.append(f"{label}: job {key[0]} at {key[1]}: run {run}")
        for delivery in effects.get(key, []):
            lines.append(f"    effect at {delivery.at:.3f} attempt {delivery.attempt}")
        for fact in sorted(by_run.get(run.run_id, []) if run else [], key=lambda f: f.attempt):
            lines.append(
                f"    attempt {fact.attempt} {fact.worker} {fact.outcome} from {fact.started_at}"
            )
    for fact in findings.after_cancel[:10]:
        lines.append(f"attempt after cancel: {fact}")
    return lines
