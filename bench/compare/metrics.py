"""Figures from runs: per-run metrics, then median/min/max over repetitions, and ratios."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from bench.compare.runner import RunResult

# (metric, unit, lower is better)
METRICS: tuple[tuple[str, str, bool], ...] = (
    ("last_publish", "s", True),
    ("lateness_p50", "s", True),
    ("lateness_p99", "s", True),
    ("lateness_max", "s", True),
    ("firings_per_s", "1/s", False),
    ("within_60s", "fraction", False),
    ("startup", "s", True),
    ("peak_rss", "MiB", True),
    ("cpu", "s", True),
    ("cpu_per_1000_firings", "s", True),
    ("duplicates", "count", True),
    ("resent", "count", True),
    ("misses", "count", True),
    # Failover only (bench.compare.failover).
    ("victim_share", "fraction", False),
    ("resume", "s", True),
    ("lateness_p99_after_kill", "s", True),
    ("lateness_max_after_kill", "s", True),
    ("lateness_p99_settled", "s", True),
    # End to end only (bench.compare.e2e): counted at the HTTP target.
    ("last_executed", "s", True),
    ("executions_per_s", "1/s", False),
    ("cpu_scheduler", "s", True),
    ("cpu_workers", "s", True),
    ("cpu_services", "s", True),
)
FAILOVER_METRICS = frozenset(
    ("victim_share", "resume", "lateness_p99_after_kill", "lateness_max_after_kill",
     "lateness_p99_settled")
)  # fmt: skip
E2E_METRICS = frozenset(
    ("last_executed", "executions_per_s", "cpu_scheduler", "cpu_workers", "cpu_services")
)
UNITS = {name: unit for name, unit, _ in METRICS}
LOWER_IS_BETTER = {name: lower for name, _, lower in METRICS}


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    index = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def run_metrics(run: RunResult) -> dict[str, float | None]:
    late = run.lateness_s
    due = run.case.due
    peak_rss = max((s.rss_bytes for s in run.samples), default=0) / 2**20
    cpu = max((s.cpu_s for s in run.samples), default=0.0)
    if run.case.scenario == "failover":
        return _failover_metrics(run, peak_rss, cpu)
    if run.case.scenario == "steady":
        return _steady_metrics(run, peak_rss, cpu)
    if run.case.scenario == "e2e":
        return _e2e_metrics(run, peak_rss, cpu)
    last = late[-1] if late and run.misses == 0 else None
    return {
        # Time from the due instant until the last due message was in the broker.
        "last_publish": last,
        "lateness_p50": percentile(late, 0.50) if late else None,
        "lateness_p99": percentile(late, 0.99) if late else None,
        "lateness_max": late[-1] if late else None,
        "firings_per_s": due / last if last and last > 0 else None,
        "within_60s": sum(1 for x in late if x <= 60.0) / due,
        "startup": run.ready_at - run.spawned_at if run.ready_at else None,
        "peak_rss": peak_rss or None,
        "cpu": cpu or None,
        "cpu_per_1000_firings": cpu * 1000 / len(late) if late and cpu else None,
        "duplicates": float(run.duplicates),
        "resent": float(run.resent),
        "misses": float(run.misses),
    } | dict.fromkeys(FAILOVER_METRICS | E2E_METRICS)


def _e2e_metrics(run: RunResult, peak_rss: float, cpu: float) -> dict[str, float | None]:
    """Lateness here is the due instant to the target's first request for each firing."""
    late = run.lateness_s
    last = late[-1] if late and run.misses == 0 else None
    split = run.cpu_split
    return dict.fromkeys(UNITS) | {
        # Time from the due instant until the target had served every due firing.
        "last_executed": last,
        "executions_per_s": run.case.due / last if last and last > 0 else None,
        "lateness_p50": percentile(late, 0.50) if late else None,
        "lateness_p99": percentile(late, 0.99) if late else None,
        "lateness_max": late[-1] if late else None,
        "startup": run.ready_at - run.spawned_at if run.ready_at else None,
        "peak_rss": peak_rss or None,
        # Scheduler and workers; the databases' share is cpu_services.
        "cpu": cpu or None,
        "cpu_per_1000_firings": cpu * 1000 / len(late) if late and cpu else None,
        "cpu_scheduler": split.get("scheduler"),
        "cpu_workers": split.get("workers"),
        "cpu_services": split.get("services") or None,
        "duplicates": float(run.duplicates),
        "misses": float(run.misses),
    }


def _steady_metrics(run: RunResult, peak_rss: float, cpu: float) -> dict[str, float | None]:
    late = run.lateness_s
    return {
        "last_publish": None,
        "lateness_p50": percentile(late, 0.50) if late else None,
        "lateness_p99": percentile(late, 0.99) if late else None,
        "lateness_max": late[-1] if late else None,
        # Firings published during the run, over its duration: the rate actually sustained.
        "firings_per_s": len(late) / run.case.duration_s,
        "within_60s": sum(1 for x in late if x <= 60.0) / len(late) if late else None,
        "startup": run.ready_at - run.spawned_at if run.ready_at else None,
        "peak_rss": peak_rss or None,
        "cpu": cpu or None,
        "cpu_per_1000_firings": cpu * 1000 / len(late) if late and cpu else None,
        "duplicates": float(run.duplicates) if run.counted else None,
        "resent": float(run.resent),
        "misses": float(run.misses) if run.counted else None,
    } | dict.fromkeys(FAILOVER_METRICS | E2E_METRICS)


def _failover_metrics(run: RunResult, peak_rss: float, cpu: float) -> dict[str, float | None]:
    figures = dict.fromkeys(UNITS) | _steady_metrics(run, peak_rss, cpu)
    stats = run.failover
    if stats is None:
        return figures
    return figures | {
        "victim_share": stats.victim_share,
        "resume": stats.resume_s,
        "lateness_p99_after_kill": stats.lateness_p99_after,
        "lateness_max_after_kill": stats.lateness_max_after,
        "lateness_p99_settled": stats.lateness_p99_settled,
        "duplicates": float(stats.duplicates),
        "misses": float(stats.misses),
    }


@dataclass(frozen=True)
class Figure:
    scheduler: str
    scenario: str
    n: int
    registered: int
    metric: str
    value: float | None
    minimum: float | None
    maximum: float | None
    repetitions: int

    @property
    def unit(self) -> str:
        return UNITS[self.metric]


def summarise(runs: list[RunResult]) -> list[Figure]:
    """Median, min and max of each metric over the repetitions of one scheduler and case."""
    per_run = [run_metrics(run) for run in runs]
    first = runs[0]
    figures = []
    for metric, _, _ in METRICS:
        values = [m[metric] for m in per_run if m[metric] is not None]
        figures.append(
            Figure(
                scheduler=first.scheduler,
                scenario=first.case.scenario,
                n=first.case.due,
                registered=first.case.registered,
                metric=metric,
                value=statistics.median(values) if values else None,
                minimum=min(values) if values else None,
                maximum=max(values) if values else None,
                repetitions=len(runs),
            )
        )
    return figures


def pairwise_ratio(ours: list[RunResult], peer: list[RunResult], metric: str) -> float | None:
    """Median over repetitions of ours/peer, each pair measured back to back in one run, so
    that drift of a shared machine between repetitions cancels out."""
    ratios = []
    for mine, theirs in zip(ours, peer, strict=False):
        a, b = run_metrics(mine)[metric], run_metrics(theirs)[metric]
        if a is not None and b:
            ratios.append(a / b)
    return statistics.median(ratios) if ratios else None
