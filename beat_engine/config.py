"""EngineConfig: the engine's settings, read once from Django settings."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any


def default_node_id(slot: int = 0) -> str:
    """``<host>-<slot>``: the same after a restart, so the rendezvous assignment gives the
    node back the partitions it had instead of moving them twice (docs/engine.md, "Node
    identity"). Run several nodes on one host with different slots."""
    return f"{socket.gethostname()}-{slot}"


def broker_redis_url(broker_url: str) -> str:
    """Celery spells a Unix-socket Redis ``redis+socket://``; redis-py wants ``unix://``."""
    if broker_url.startswith("redis+socket://"):
        return "unix://" + broker_url[len("redis+socket://") :]
    return broker_url


@dataclass(frozen=True)
class EngineConfig:
    node_id: str
    partitions: int
    lease_ttl_s: float
    lease_renew_s: float
    lookahead_s: float
    claim_batch: int
    run_lease_s: float
    publish_sweep_after_s: float
    redis_url: str
    broker_url: str
    # Longest the loop sleeps without looking at the clock, so SIGTERM is honoured promptly.
    max_sleep_s: float = 0.5
    timer_poll_s: float = 0.5
    # Most entries loaded per partition per refresh: memory holds a page, never every job.
    horizon_page: int = 20_000
    # Every this often the horizon is reloaded even without notifications (lost ones).
    refresh_s: float = 5.0
    # Most rows one step of a refresh loads, one step a tick (beat_engine/refresh_steps.py).
    refresh_step_rows: int = 1000
    # Every partition's horizon is reloaded whole about this often, a slice of the partitions
    # at each refresh (beat_engine/reload_turns.py); otherwise refreshes only extend it.
    full_refresh_s: float = 60.0
    sweep_s: float = 2.0
    # Most due firings claimed in one tick before the loop looks at leases again, and the
    # longest it claims (it also stops when a lease renewal is due): at a steady arrival rate
    # something is always due, and only a time bound lets the loop renew its leases.
    max_claims_per_tick: int = 20_000
    max_claim_s: float = 0.5
    # Firings due within this long are claimed ahead of their instant unless a backlog drains,
    # and pushed at it (docs/engine.md, "Claim ahead"); 0 claims each firing at its instant.
    claim_ahead_s: float = 20.0
    # How late a claim-ahead batch may make the next armed push (docs/engine.md, "Claim
    # ahead", "Under a steady stream"); 0: a batch always ends before it.
    claim_ahead_slack_s: float = 0.03
    # Runs claimed ahead for one instant and one broker list, at least this many, have their
    # messages staged in the broker at the claim and moved at the instant
    # (beat_engine/broker_staging.py); 0: every armed run is pushed at its instant.
    stage_min_runs: int = 100
    # While a backlog drains, each claim batch takes as many rows (at most claim_batch) as
    # fit in about this long by the last batches' time per row (beat_engine/batch_sizer.py):
    # the longest a firing of another tenant waits for the batch in hand. 0: claim_batch.
    # Never below claim_batch_min rows: past that, a batch's fixed costs are what takes time.
    claim_batch_target_s: float = 0.25
    claim_batch_min: int = 100
    # When more than one batch is due, up to this many due entries are put in tenant
    # round-robin order before claiming (bounded memory, and fairness within that window).
    fair_window: int = 20_000
    # A queued run is republished when no worker started it this long after its publish
    # (message lost in a broker restart); longer than the run lease to spare slow queues.
    republish_after_s: float = 60.0
    # Published runs are marked published (a hint for the sweep) when no claim is due, or
    # after at most this long: the mark is off the critical path of a spike. Capped at half
    # of publish_sweep_after_s (mark_within_s) so that the sweep never sees an unmarked run.
    mark_delay_s: float = 5.0
    # While partitions of its target are still held by another node, a node asks again this
    # often (the hand-over is announced on the change feed; this covers a lost message).
    handover_retry_s: float = 0.25
    # After another node's registration has run out, how long to wait before looking: its
    # leases are extended just after its registration, so they lapse a moment later.
    peer_lapse_margin_s: float = 0.02
    # SIGTERM: the node keeps firing until the nodes that will take its partitions have
    # loaded them, for at most this long, then hands them over; it looks this often.
    leave_wait_s: float = 3.0
    leave_poll_s: float = 0.05
    # A partition taken over from a dead node first loads only what is due this soon (its
    # first claims are the firings it missed), and the rest of its horizon at the next tick.
    takeover_load_s: float = 1.0
    # Its overdue firings are claimed before anything else, the first batch of them at most
    # this many jobs: a replay_all job brings every firing it missed, so a full claim_batch
    # of them was a catch-up of thousands of firings pushed only once all were written.
    takeover_first_batch: int = 100
    # The lease keeper renews on its own thread only while the engine's loop came round
    # within this long (beat_engine/lease_keeper.py): a hung loop's partitions fail over.
    keeper_stall_s: float = 30.0
    # The share of a backlog's claim order reserved for the lowest priority waiting
    # (SCHEDULER_LOW_PRIORITY_SHARE, docs/limits.md "Priorities").
    low_priority_share: float = 0.1
    # Backpressure (beat_engine/backpressure.py): at this many messages waiting in a broker
    # queue the node stops pushing to it and holds the runs, queued in the database, until
    # the queue drains (0: no bound); while it holds runs it looks at the depth this often.
    broker_queue_bound: int = 100_000
    backpressure_poll_s: float = 0.1
    # Below broker_queue_bound, each queue's bound follows its measured drain rate: about
    # this many seconds of the workers' work wait in the broker, and never fewer than
    # broker_queue_min_bound messages (beat_engine/drain_bound.py); 0: the fixed bound only.
    broker_queue_target_wait_s: float = 1.0
    broker_queue_min_bound: int = 50
    # PostgreSQL ends this node's sessions idle this long inside a transaction (db_session.py).
    idle_tx_timeout_s: float = 10.0
    # How often the holder of partition 0 purges history past its retention
    # (beat_engine/history_purger.py, docs/history.md).
    history_purge_s: float = 300.0
    # How often the holder of partition 0 archives the days past the hot window
    # (beat_engine/history_archiver.py, docs/history.md, "Archive").
    history_archive_s: float = 86_400.0

    @classmethod
    def from_settings(
        cls, *, node_id: str | None = None, slot: int | None = None, **overrides: Any
    ) -> EngineConfig:
        from django.conf import settings

        sched = settings.SCHEDULER
        if slot is None:
            slot = int(sched.get("NODE_SLOT", 0))
        values: dict[str, Any] = {
            "node_id": node_id or default_node_id(slot),
            "partitions": int(sched["PARTITIONS"]),
            "lease_ttl_s": float(sched["LEASE_TTL_S"]),
            "lease_renew_s": float(sched["LEASE_RENEW_S"]),
            "lookahead_s": float(sched["LOOKAHEAD_S"]),
            "claim_batch": int(sched["CLAIM_BATCH"]),
            "run_lease_s": float(sched["RUN_LEASE_S"]),
            "publish_sweep_after_s": float(sched["PUBLISH_SWEEP_AFTER_S"]),
            "redis_url": settings.REDIS_URL,
            "broker_url": broker_redis_url(settings.CELERY_BROKER_URL),
            "republish_after_s": 2 * float(sched["RUN_LEASE_S"]),
            "claim_batch_target_s": float(sched.get("CLAIM_BATCH_TARGET_S", 0.25)),
            # Never beyond the look-ahead: only the heap's firings can be claimed ahead.
            "claim_ahead_s": min(
                float(sched.get("CLAIM_AHEAD_S", 20.0)), float(sched["LOOKAHEAD_S"])
            ),
            "claim_ahead_slack_s": float(sched.get("CLAIM_AHEAD_SLACK_S", 0.03)),
            "stage_min_runs": int(sched.get("STAGE_MIN_RUNS", 100)),
            "low_priority_share": float(sched.get("LOW_PRIORITY_SHARE", 0.1)),
            "broker_queue_bound": int(sched.get("BROKER_QUEUE_MAX_DEPTH", 100_000)),
            "broker_queue_target_wait_s": float(sched.get("BROKER_QUEUE_TARGET_WAIT_S", 1.0)),
            "broker_queue_min_bound": int(sched.get("BROKER_QUEUE_MIN_BOUND", 50)),
            "idle_tx_timeout_s": float(sched.get("ENGINE_IDLE_TX_TIMEOUT_S", 10.0)),
            "history_purge_s": float(sched.get("HISTORY_PURGE_S", 300.0)),
            "history_archive_s": float(sched.get("HISTORY_ARCHIVE_S", 86_400.0)),
        }
        values.update(overrides)
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if self.lease_renew_s >= self.lease_ttl_s:
            raise ValueError(
                f"lease renewal ({self.lease_renew_s}s) must be shorter than the lease TTL "
                f"({self.lease_ttl_s}s), or every lease lapses between renewals"
            )
        if self.partitions < 1 or self.claim_batch < 1:
            raise ValueError("partitions and claim batch must be positive")
        if not 0 <= self.claim_ahead_s <= self.lookahead_s:
            raise ValueError(
                f"claim ahead ({self.claim_ahead_s}s) must lie between 0 and the look-ahead "
                f"({self.lookahead_s}s): only firings in the heap can be claimed ahead"
            )
        if self.stage_min_runs < 0:
            raise ValueError("the staging threshold is a number of runs, or 0 to stage none")
        if self.claim_batch_target_s < 0:
            raise ValueError("a claim batch's target time is positive, or 0 for a fixed size")

    @property
    def mark_within_s(self) -> float:
        return min(self.mark_delay_s, self.publish_sweep_after_s / 2)

    @property
    def lease_ttl_ms(self) -> int:
        return int(self.lease_ttl_s * 1000)
