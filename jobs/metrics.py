"""Prometheus metrics with prometheus_client: what workers and the web count, and exposition.

Every process keeps its own values and is scraped (docs/operations.md, "Scraping"). Processes
that fork (gunicorn workers, Celery's prefork children) run in prometheus_client's multiprocess
mode: with PROMETHEUS_MULTIPROC_DIR set, each process writes its values to files there and the
exporter of the host's main process (or any gunicorn worker, for /metrics) adds them up. Labels
stay bounded (tenant, queue, target kind, outcome; never a job or run id): per-job figures are
served by the API (docs/api.md).

The beat engine's own metrics are in beat_engine/metrics.py; every name is listed in
docs/operations.md, and tests/unit/jobs/test_metrics_doc.py holds the two to each other.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Iterable
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
    start_http_server,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
if os.environ.get(MULTIPROC_ENV):
    # prometheus_client opens its value files there as the metrics below are defined.
    os.makedirs(os.environ[MULTIPROC_ENV], exist_ok=True)

# Seconds late: on time is tens of milliseconds, a failover tens of seconds, a backlog minutes.
LAG_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
# How long targets run: a no-op callable takes a millisecond, an HTTP call up to its timeout.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                    300.0, 1800.0)  # fmt: skip

# --- execution (workers) ----------------------------------------------------------------------
START_LAG = Histogram(
    "scheduler_start_lag_seconds",
    "Due instant to start of each attempt (database clock), by the job's queue.",
    ["queue"],
    buckets=LAG_BUCKETS,
)
RUN_DURATION = Histogram(
    "scheduler_run_duration_seconds",
    "Start to outcome of each attempt that ran its target, by target kind.",
    ["target_kind"],
    buckets=DURATION_BUCKETS,
)
RUNS_FINISHED = Counter(
    "scheduler_runs_finished_total",
    "Attempts whose outcome was recorded, by the state the run moved to.",
    ["outcome"],
)
RETRIES = Counter(
    "scheduler_retries_total",
    "Attempts that failed and left their run waiting for a retry, by target kind.",
    ["target_kind"],
)
DEAD_LETTERS = Counter(
    "scheduler_dead_letters_total",
    "Runs moved to dead letters: attempts spent on failures (workers) or lost leases (engine).",
)
RUNS_SKIPPED = Counter(
    "scheduler_runs_skipped_total",
    "Runs the job's concurrency policy skipped at their start, by policy.",
    ["reason"],
)
RUNS_DEFERRED = Counter(
    "scheduler_runs_deferred_total",
    "Runs the job's concurrency policy sent back to wait at their start, by policy.",
    ["reason"],
)
# Running limits (jobs/services/running_limits.py): a run parked at its start, by the limit.
RUNS_HELD = Counter(
    "scheduler_runs_held_total",
    "Runs parked at their start because their tenant's or job's running limit was reached.",
    ["limit"],
)
DUPLICATE_DELIVERIES = Counter(
    "scheduler_duplicate_deliveries_total",
    "Messages whose attempt was no longer queued (redelivered or re-sent), dropped at the start.",
)
STALE_COMPLETIONS = Counter(
    "scheduler_stale_completions_total",
    "Outcomes refused because their attempt was no longer current.",
)
DEDUP_HITS = Counter(
    "scheduler_dedup_hits_total",
    "Effects not repeated because their idempotency key was already done, by where it was seen.",
    ["source"],
)
OUTCOME_WRITE_RETRIES = Counter(
    "scheduler_outcome_write_retries_total",
    "Outcome writes tried again after a deadlock or serialization failure.",
)
DB_RECONNECTS = Counter(
    "scheduler_db_reconnects_total",
    "Connections dropped because the PostgreSQL primary was gone, by where it was seen.",
    ["site"],
)
# History retention (jobs/services/history_retention.py): rows purged past their retention.
HISTORY_PURGED_ROWS = Counter(
    "scheduler_history_purged_rows_total",
    "Rows purged past their retention by the beat nodes' history duty, by table.",
    ["table"],
)
HISTORY_PARTITION_DAYS = Counter(
    "scheduler_history_partition_days_total",
    "Days of run history whose partitions the beat nodes created (created), or left in the "
    "default partition because it already held rows of them (in_default).",
    ["outcome"],
)
# The archive (jobs/services/run_archive.py): days by what a pass did with them, rows archived.
HISTORY_ARCHIVE_DAYS = Counter(
    "scheduler_history_archive_days_total",
    "Days of run history an archive pass archived (archived), kept hot (held), or left for the "
    "next pass because their locks were taken (busy).",
    ["outcome"],
)
HISTORY_ARCHIVED_ROWS = Counter(
    "scheduler_history_archived_rows_total",
    "Rows archived to files and dropped from PostgreSQL, by table (jobs_jobrun, jobs_runattempt).",
    ["table"],
)
HEARTBEAT_ERRORS = Counter(
    "scheduler_heartbeat_errors_total", "Heartbeats of running attempts that raised."
)
ABANDONED_TARGETS = Counter(
    "scheduler_abandoned_targets_total",
    "Target threads that ignored a stop past the cancel grace and were left running.",
)
TARGET_THREAD_ERRORS = Counter(
    "scheduler_target_thread_errors_total", "Errors of the reused target threads themselves."
)
MALFORMED_MESSAGES = Counter(
    "scheduler_malformed_messages_total", "Execution messages whose arguments could not be read."
)
WORKER_RETIREMENTS = Counter(
    "scheduler_worker_retirements_total",
    "Pool processes replaced after their run because they held too many abandoned targets.",
)
WORKER_RETIRE_UNAVAILABLE = Counter(
    "scheduler_worker_retire_unavailable_total",
    "Pool processes that should have been replaced but could not be (no pool restart).",
)
SHUTDOWN_HANDED_BACK = Counter(
    "scheduler_shutdown_handed_back_total",
    "Running attempts a stopping worker ended and handed back to retry_wait (or dead-lettered).",
)

# --- dead letters (workers, web) ---------------------------------------------------------------
DEAD_LETTER_ANNOUNCE_ERRORS = Counter(
    "scheduler_dead_letter_announce_errors_total",
    "Dead-letter notices that could not be handed to the broker.",
)
DEAD_LETTER_REPLAYS = Counter(
    "scheduler_dead_letter_replays_total", "Dead-lettered runs replayed by an operator."
)


def observe_many(child: Histogram, values: Iterable[float]) -> None:
    """Observe many values at once: one increment per bucket, not per value.

    A spike pushes 50,000 runs at once; observe() per run cost 2.2 µs each (110 ms per spike,
    measured), this about 0.2 µs. It relies on prometheus_client's internal layout (upper
    bounds and non-cumulative bucket values), checked against observe() by
    tests/unit/jobs/test_metrics.py; without that layout it falls back to observe().
    """
    bounds = getattr(child, "_upper_bounds", None)
    buckets = getattr(child, "_buckets", None)
    total = getattr(child, "_sum", None)
    if bounds is None or buckets is None or total is None or len(bounds) != len(buckets):
        for value in values:
            child.observe(value)
        return
    counts = [0] * len(bounds)
    amount = 0.0
    for value in values:
        counts[bisect.bisect_left(bounds, value)] += 1
        amount += value
    if amount:
        total.inc(amount)
    for index, count in enumerate(counts):
        if count:
            buckets[index].inc(count)


def multiprocess_dir() -> Path | None:
    path = os.environ.get(MULTIPROC_ENV)
    return Path(path) if path else None


def exposition_registry() -> CollectorRegistry:
    """What a scrape returns: every process of this host's group in multiprocess mode, else
    this process's own metrics."""
    path = multiprocess_dir()
    if path is None:
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(path))  # type: ignore[no-untyped-call]
    return registry


def render() -> tuple[bytes, str]:
    """The Prometheus text format of exposition_registry(), and its content type."""
    return generate_latest(exposition_registry()), CONTENT_TYPE_LATEST


def clear_multiprocess_dir() -> None:
    """Remove the value files of earlier runs of this process group, before it forks.

    Done by the group's main process at start (prometheus_client's rule: the directory is
    emptied between runs); its own files, already open, stay.
    """
    path = multiprocess_dir()
    if path is None:
        return
    path.mkdir(parents=True, exist_ok=True)
    own = f"_{os.getpid()}.db"
    for stale in path.glob("*.db"):
        if not stale.name.endswith(own):
            stale.unlink(missing_ok=True)


def process_exited(pid: int) -> None:
    """A forked process ended: its live gauges stop counting (multiprocess mode only)."""
    if multiprocess_dir() is not None:
        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def start_exporter(port: int, addr: str) -> None:
    """Serve exposition_registry() over HTTP on a thread of this process (beat, worker)."""
    start_http_server(port, addr=addr, registry=exposition_registry())
