"""The beat engine's Prometheus metrics, bumped once per batch, never per firing.

A node does not fork: it keeps its values in memory and serves them on its own loopback port
(``beat_engine --metrics-port``, docs/operations.md). Names are listed in docs/operations.md.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from jobs.metrics import DEAD_LETTERS, LAG_BUCKETS, observe_many, start_exporter

if TYPE_CHECKING:
    from beat_engine.backpressure import HeldRuns
    from beat_engine.publisher import QueuedRun

# Claims and ticks: a claim batch takes milliseconds to a few hundred when a spike drains.
_DURATION_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

FIRINGS_CLAIMED = Counter(
    "scheduler_firings_claimed_total", "Firings claimed: runs inserted for due firings."
)
FIRINGS_MISSED = Counter(
    "scheduler_firings_missed_total",
    "Firings recorded as missed (past the starting deadline, or skipped by catch-up).",
)
RUNS_PUBLISHED = Counter(
    "scheduler_runs_published_total", "Run messages pushed into the broker (sends and re-sends)."
)
RUNS_REPUBLISHED = Counter(
    "scheduler_runs_republished_total",
    "Runs sent again by the sweep because their message was lost.",
)
TIMERS_FIRED = Counter(
    "scheduler_timers_fired_total", "Pending and retry_wait runs queued when they became due."
)
RUNS_REAPED = Counter(
    "scheduler_runs_reaped_total", "Running attempts whose lease expired, queued again."
)
RUNS_DEAD = DEAD_LETTERS
FENCED = Counter(
    "scheduler_fenced_out_total",
    "Partitions a claim or timer transaction found fenced out (a newer owner holds them).",
)
LEASES_ACQUIRED = Counter(
    "scheduler_partition_leases_acquired_total", "Partition leases taken (each with a new epoch)."
)
LEASES_LOST = Counter(
    "scheduler_partition_leases_lost_total",
    "Partition leases found expired or taken over at renewal.",
)
LEASE_RENEWALS = Counter(
    "scheduler_partition_lease_renewals_total", "Partition leases extended at renewal."
)
LEASE_RENEWAL_GAP = Histogram(
    "scheduler_lease_renewal_gap_seconds",
    "Seconds between two renewals of a node's held leases (by its tick or its lease keeper); "
    "near the lease TTL, leases are about to lapse.",
    buckets=(0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0),
)
PARTITIONS_OWNED = Gauge(
    "scheduler_partitions_owned", "Partitions this node holds a lease on.", multiprocess_mode="max"
)
PARTITIONS = Gauge(
    "scheduler_partitions", "Partitions the jobs are spread over.", multiprocess_mode="max"
)
ENGINE_ERRORS = Counter(
    "scheduler_engine_errors_total", "Ticks that failed (database or Redis errors); retried."
)
DEAD_LETTER_NOTICES_DROPPED = Counter(
    "scheduler_dead_letter_notices_dropped_total",
    "Dead-letter notices dropped because their queue was full.",
)
TENANT_DEFERRALS = Counter(
    "scheduler_tenant_deferrals_total",
    "Firings held back because their tenant was at max_queued_runs, by tenant id.",
    ["tenant"],
)
PUBLISH_LAG = Histogram(
    "scheduler_publish_lag_seconds",
    "Due instant to push into the broker of each claimed or timer-queued run, by queue.",
    ["queue"],
    buckets=LAG_BUCKETS,
)
TICK_DURATION = Histogram(
    "scheduler_tick_duration_seconds", "Duration of each engine tick.", buckets=_DURATION_BUCKETS
)
CLAIM_DURATION = Histogram(
    "scheduler_claim_duration_seconds",
    "Duration of each claim transaction (fence, advance jobs, insert runs).",
    buckets=_DURATION_BUCKETS,
)
QUEUE_DEPTH = Gauge(
    "scheduler_queue_depth",
    "Messages waiting in each broker queue, sampled by the beat nodes that publish to it.",
    ["queue"],
    multiprocess_mode="max",
)


QUEUE_BOUND = Gauge(
    "scheduler_queue_bound",
    "Each broker queue's bound now, sized from its measured drain rate "
    "(SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S) and at most SCHEDULER_BROKER_QUEUE_MAX_DEPTH.",
    ["queue"],
    multiprocess_mode="max",
)


PUBLISHES_HELD_BACK = Counter(
    "scheduler_publishes_held_back_total",
    "Claimed runs held back because their broker queue was at its bound "
    "(SCHEDULER_BROKER_QUEUE_MAX_DEPTH); pushed when it drains.",
    ["queue"],
)
RUNS_HELD_BACK = Gauge(
    "scheduler_runs_held_back",
    "Runs this node holds back, queued in the database, until their broker queue drains.",
    ["queue"],
    multiprocess_mode="max",
)


def count_held_back(queue: str, runs: int) -> None:
    if runs:
        PUBLISHES_HELD_BACK.labels(queue=queue).inc(runs)


def set_held(held: HeldRuns[QueuedRun], queues: Iterable[str] = ()) -> None:
    """The held-back gauge of every queue with held runs, and of ``queues`` (0 once drained)."""
    for queue in {*queues, *held.queues()}:
        RUNS_HELD_BACK.labels(queue=queue).set(held.count(queue))


def set_queue_bound(queue: str, bound: int) -> None:
    QUEUE_BOUND.labels(queue=queue).set(bound)


def count(counter: Counter, amount: int = 1) -> None:
    if amount:
        counter.inc(amount)


def count_deferrals(tenants: Iterable[int]) -> None:
    for tenant, deferred in Tally(tenants).items():
        TENANT_DEFERRALS.labels(tenant=str(tenant)).inc(deferred)


def observe_publish_lag(runs: Sequence[QueuedRun], pushed_at: datetime) -> None:
    """Each run's due instant to ``pushed_at``, for the runs that carry one."""
    by_queue: dict[str, list[float]] = {}
    for run in runs:
        if run.due_at is not None:
            by_queue.setdefault(run.queue, []).append((pushed_at - run.due_at).total_seconds())
    for queue, lags in by_queue.items():
        observe_many(PUBLISH_LAG.labels(queue=queue), lags)


def start_node_exporter(port: int | None) -> None:
    """Serve this node's metrics on ``port`` (None: SCHEDULER_BEAT_METRICS_PORT; 0: none)."""
    from django.conf import settings

    chosen = settings.SCHEDULER_BEAT_METRICS_PORT if port is None else port
    if chosen:
        start_exporter(chosen, settings.SCHEDULER_METRICS_ADDR)
