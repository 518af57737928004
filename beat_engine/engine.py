"""BeatEngine: tick() keeps leases, claims due firings, fires timers, and says how long to sleep."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import redis
from django.db import DatabaseError, connection

from beat_engine import metrics
from beat_engine.armed import ArmedRuns
from beat_engine.batch_sizer import BatchSizer
from beat_engine.broker_staging import StagedGroup
from beat_engine.claims import ClaimResult, commit_claim, prepare_claim
from beat_engine.clock import Clock
from beat_engine.config import EngineConfig
from beat_engine.deferrals import DeferralLog
from beat_engine.errors import FencedOut
from beat_engine.fair_order import FairDueHeap
from beat_engine.fencing import epochs_current
from beat_engine.heap import DueEntry, interleave_by_tenant
from beat_engine.history_archiver import HistoryArchiver
from beat_engine.history_purger import HistoryPurger
from beat_engine.horizon import load_horizon, load_jobs
from beat_engine.lease_keeper import LeaseKeeper
from beat_engine.leases import Lease, LeaseStore
from beat_engine.live_floor import LiveFloor
from beat_engine.live_floor_reader import LiveFloorReader
from beat_engine.notices import DeadLetterNotices
from beat_engine.notifications import ChangeFeed, Changes
from beat_engine.outbox import Outbox
from beat_engine.ownership import Ownership
from beat_engine.pipeline import ClaimBatch, Prepared, Preparer
from beat_engine.priority_order import ReservedShare, order_by_priority
from beat_engine.publisher import Publisher, QueuedRun, Rendered
from beat_engine.quotas import TenantAllowances
from beat_engine.refresh_steps import RefreshSteps
from beat_engine.reload_turns import ReloadTurns
from beat_engine.staging import StagedHorizon
from beat_engine.sweep import claimed_ahead, sweep_lost_publishes
from beat_engine.timers import fire_timers
from beat_engine.webhook_sender import WebhookSender
from jobs import metrics as jobs_metrics
from jobs.db_failover import backoff_s, connection_lost
from jobs.services.reasons import reasons_purge

logger = logging.getLogger("beat_engine")

# Most sweep batches (of claim_batch runs) per sweep: a takeover after a spike may find tens
# of thousands of runs to send, but one tick must not starve lease renewal.
_SWEEP_BATCHES_PER_TICK = 10
# How far a timer batch grows while each comes back full (a parent's 10,000 children made
# pending at once): up to this many times claim_batch per fenced transaction.
_TIMER_BATCH_GROWTH = 4

# How often tenant-limit deferrals counted in memory are written (beat_engine/deferrals.py).
_DEFERRALS_FLUSH_S = 5.0
# How often a node purges decision reasons and job events past their retention; every node
# does (a delete of what another node already deleted finds nothing).
_REASONS_PURGE_S = 600.0
# How often the delivery thread is woken for due webhook deliveries, and how often the node
# holding partition 0 checks tenants' lateness (docs/operations.md, "Notifications").
_WEBHOOKS_POLL_S = 2.0
_LATENESS_CHECK_S = 60.0
# How often a node samples the length of the broker queues it publishes to (a gauge).
_QUEUE_DEPTH_S = 5.0
# How often runs whose push the broker refused are sent again while it stays away.
_RESEND_S = 0.5
_MICROSECOND = timedelta(microseconds=1)
# A claim-ahead batch ends at least this long before the next armed run's instant.
_ARMED_MARGIN_S = 0.05
# Most runs claimed ahead by a partition's last owner armed at its takeover; the sweep finds the
# rest (about 300 bytes each in memory).
_ARM_TAKEN_MAX = 100_000


class BeatEngine:
    def __init__(
        self,
        *,
        config: EngineConfig,
        clock: Clock,
        store: LeaseStore,
        publisher: Publisher,
        feed: ChangeFeed | None = None,
        notices: DeadLetterNotices | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        # One heap per tenant, due entries handed out in fair rounds across the whole spike
        # (beat_engine/fair_order.py), not only inside one fair_window.
        self.heap = FairDueHeap()
        self.feed = feed
        self._outbox = Outbox(
            publisher=publisher, clock=clock, node_id=config.node_id,
            mark_within_s=config.mark_within_s, queue_bound=config.broker_queue_bound,
            queue_target_wait_s=config.broker_queue_target_wait_s,
            queue_min_bound=config.broker_queue_min_bound,
            low_priority_share=config.low_priority_share,
        )  # fmt: skip
        self.ownership = Ownership(config=config, clock=clock, store=store)
        self.ownership.before_handover = self._before_handover
        self.ownership.before_join = self._stage
        self.ownership.before_peers_leave = self._stage
        # A joining node's share, loaded before it asks for it (beat_engine/staging.py).
        self._staged = StagedHorizon(clock, max_age_s=config.refresh_s)
        # Renews the leases from a thread of its own while a tick is busy (run() starts it;
        # tests driving tick() on a FakeClock renew in the tick only).
        self._keeper = LeaseKeeper(self.ownership, clock, stall_s=config.keeper_stall_s)
        # Sent on a thread of their own: the tick never waits for the broker that takes them.
        self._notices = notices if notices is not None else DeadLetterNotices()
        self._loaded_until: dict[int, datetime] = {}
        # Due entries already taken off the heap and put in tenant-fair order, claimed a batch
        # at a time; only non-empty while more than one batch is due.
        self._backlog: list[DueEntry] = []
        # A window of the backlog is being claimed, up to the first batch cut without one (a
        # steady rate's): between two windows and at the last one's tail too, so firings of
        # other tenants are claimed ahead of the batches (_claim_behind).
        self._draining = False
        # Due entries of partitions just taken (the firings nobody served while they had no
        # owner), oldest first: claimed ahead of the backlog and of a carried batch.
        self._overdue: list[DueEntry] = []
        self._overdue_first = False
        # Whose turn it is in a backlog's priority order: the reserved share for the lowest
        # priority goes on from one backlog to the next.
        self._claim_turns = ReservedShare(config.low_priority_share)
        self._quotas = TenantAllowances()
        # Tenant-limit deferrals, counted here and written every _DEFERRALS_FLUSH_S.
        self._deferrals = DeferralLog()
        # Each periodic refresh reloads a slice of the partitions whole, in turn.
        self._reload_turns = ReloadTurns(config.refresh_s, config.full_refresh_s)
        # A refresh pass goes a bounded number of rows a tick (beat_engine/refresh_steps.py):
        # the partitions it reloads whole, when it began, and whether another pass follows it
        # at once (partitions were taken with only their nearest firings loaded).
        self._refresh_steps = RefreshSteps(config.refresh_step_rows)
        self._refresh_whole: frozenset[int] = frozenset()
        self._refresh_began_mono = 0.0
        self._refresh_again = False
        now_mono = clock.monotonic()
        self._next_refresh_mono = now_mono
        self._next_timer_mono = now_mono
        # The last timer pass ended on a full batch: more due runs are being drained.
        self._timers_more = False
        # The earliest pending/retry_wait run the last timer pass found not yet due.
        self._timer_next_due: datetime | None = None
        self._next_sweep_mono = now_mono
        # How far back the timer pass and the sweep look for live runs, so that they plan the
        # recent day partitions only (beat_engine/live_floor.py); read on a thread of its own.
        self._live_floor = LiveFloor()
        self._floor_reader = LiveFloorReader(self._live_floor, clock=clock, node_id=config.node_id)
        self._next_deferrals_mono = now_mono + _DEFERRALS_FLUSH_S
        self._next_purge_mono = now_mono + _REASONS_PURGE_S
        # Notification webhooks: delivered on a thread of their own (beat_engine/webhook_sender.py).
        self._webhooks = WebhookSender(clock=clock, node_id=config.node_id)
        self._next_webhooks_mono = now_mono
        # History retention: the holder of partition 0 purges (beat_engine/history_purger.py).
        self._history = HistoryPurger(clock=clock, node_id=config.node_id)
        # The first pass one period after the start, which is busy loading the horizon.
        self._next_history_mono = now_mono + config.history_purge_s
        # Archive: the holder of partition 0 too, a day apart, the first a purge period after
        # the start (beat_engine/history_archiver.py).
        self._archiver = HistoryArchiver(clock=clock, node_id=config.node_id)
        self._next_archive_mono = now_mono + min(config.history_purge_s, config.history_archive_s)
        self._next_lateness_mono = now_mono + _LATENESS_CHECK_S
        self._next_depth_mono = now_mono
        self._next_release_mono = now_mono
        self._next_resend_mono = now_mono
        self._stop_claims_at = now_mono
        # One thread (and connection) that prepares the next batch while a backlog drains.
        self._preparer = Preparer()
        # Rows per claim batch, from the time the last ones took (beat_engine/batch_sizer.py).
        self._sizer = BatchSizer(
            most=config.claim_batch, target_s=config.claim_batch_target_s,
            least=config.claim_batch_min,
        )  # fmt: skip
        # A batch prepared at the end of a tick that ran out of time, claimed first next tick.
        self._carried: ClaimBatch | None = None
        # Runs claimed ahead of their instant, pushed at it (docs/engine.md, "Claim ahead").
        self._armed = ArmedRuns()
        # Not before this does the next claim-ahead pass start (it stopped for an armed push).
        self._next_ahead_mono = now_mono
        # Ticks in a row that found no PostgreSQL primary (run's loop).
        self._failures = 0

    @property
    def leases(self) -> dict[int, Lease]:
        return self.ownership.leases

    def staged_jobs(self) -> frozenset[uuid.UUID]:
        """Jobs of partitions about to be taken whose due entries are loaded already."""
        return self._staged.job_ids()

    # --- the loop -------------------------------------------------------------------------

    def tick(self) -> float:
        """One pass; returns the seconds the caller may sleep before the next one."""
        mono = self.clock.monotonic()
        changes = self.feed.drain() if self.feed is not None else None
        if changes is not None and changes.nodes_changed:
            self.ownership.rebalance_soon()
        gained, lost = self.ownership.maintain(mono)
        self._forget(lost)
        # First: the runs claimed ahead whose instant has come are the only work left for them.
        self._push_armed()
        now = self.clock.now()
        if gained:
            self._take_over(now, gained)
        elif mono >= self._next_refresh_mono:
            # Not in a tick that took partitions over: their overdue firings are claimed
            # first, and a refresh of every partition would hold them up; the next tick does it.
            self._refresh(now)
        if changes is not None:
            self._take_changes(changes, mono)
        busy = self._claim_due()
        self._claim_ahead()
        # Marks wait while a timer drain goes on too: written between two of its ticks, 7,000
        # marks held up the last 3,000 children of one parent by 0.3 s (bench/bench_dag.py).
        self._outbox.flush_due(draining=bool(self._backlog or self._carried or self._timers_more))
        if mono >= self._next_timer_mono:
            more = self._timers_more = self._fire_timers(self.clock.now())
            # A full batch may leave more due (10,000 children of one parent): the next tick
            # fires again instead of waiting a poll per batch. Otherwise the next pass is at
            # the poll, or sooner when a timer falls due before it.
            self._next_timer_mono = mono if more else self._next_timer_pass()
        if self._outbox.held and mono >= self._next_release_mono:
            # Backpressure: held runs go out as their queue drains (beat_engine/backpressure.py).
            self._release_held()
            self._next_release_mono = mono + self.config.backpressure_poll_s
        if self._outbox.unsent and mono >= self._next_resend_mono:
            self._resend_unsent()
            self._next_resend_mono = mono + _RESEND_S
        if mono >= self._next_sweep_mono:
            self._sweep(self.clock.now())
            self._next_sweep_mono = mono + self.config.sweep_s
        self._record_duties(mono)
        if mono >= self._next_depth_mono:
            self._outbox.sample_queue_depth()
            self._next_depth_mono = mono + _QUEUE_DEPTH_S
        return 0.0 if busy else self._sleep_for()

    def _take_over(self, now: datetime, gained: list[int]) -> None:
        # A partition just taken over may hold runs its last owner claimed and never pushed
        # (it died, or its pre-publish fence check failed against our new epoch): send them
        # now, not publish_sweep_after_s later, which a failover would add to those firings'
        # lateness. Before the horizon is loaded: they are the most overdue and need no
        # horizon. A push of the old owner's that raced ours makes a second message of the
        # same run, which the worker's compare-and-set drops.
        # A node already serving partitions claims the jobs of those it takes that are due
        # now (the firings missed while nobody owned them) first, in a small first batch
        # (_claim_due): ahead of its own backlog and of the batch it carried over, and never
        # as one catch-up of thousands of firings pushed only once all of it is written. A
        # node taking its first partitions (starting) claims in the heap's fair order.
        self._overdue_first = len(self.leases) > len(gained)
        self._sweep(now, only=gained, unpublished_after=timedelta(0))
        self._arm_taken(now, gained)
        self._load_taken(now, gained)
        if self.ownership.waiting_for:
            # Loading a share takes a while; partitions handed to us meanwhile are taken now
            # rather than after this tick's claims (docs/engine.md, "Hand-over").
            handed = self.ownership.take_waiting()
            if handed:
                self._sweep(now, only=handed, unpublished_after=timedelta(0))
                self._arm_taken(now, handed)
                self._load_taken(now, handed)
        if self._overdue:
            # Oldest first, then the backlog's priority and tenant order.
            self._overdue.sort()
            self._overdue = interleave_by_tenant(
                order_by_priority(self._overdue, priority_of=_priority, share=self._claim_turns)
            )

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set, then release every lease at once."""
        self._failures = 0
        self.start_lease_keeper()
        try:
            while not stop.is_set():
                wait = self._step()
                if wait > 0 and not stop.is_set():
                    self._pause(wait)
            self.leave_when_ready()
        finally:
            self.shutdown()

    def _step(self) -> float:
        """One tick, its failure logged and counted; how long to sleep."""
        try:
            with metrics.TICK_DURATION.time():
                wait = self.tick()
            self._failures = 0
        except Exception as exc:
            # The loop's one broad except: a database or Redis outage must not end
            # the node; the next tick retries on a fresh connection.
            metrics.count(metrics.ENGINE_ERRORS)
            connection.close()
            if connection_lost(exc):
                self._failures += 1
                wait = self._database_lost(exc, self._failures)
            else:
                logger.exception("beat.tick_failed", extra={"node": self.config.node_id})
                wait = 1.0
        return wait

    def _pause(self, wait: float) -> None:
        if self.feed is not None:
            self.feed.wait(wait)
        else:
            self.clock.sleep(wait)

    def leave_when_ready(self) -> bool:
        """SIGTERM, before the hand-over: mark this node as stopping and keep firing its
        partitions until every node that will take one has loaded their horizon and answered,
        for at most ``leave_wait_s``: a node that does not answer (dead, or too busy) delays
        the stop by that much and no more. Returns whether all answered.

        The hand-over itself (shutdown) is unchanged, the fence its guard: this only moves
        the new owners' horizon load before it (docs/engine.md, "Hand-over")."""
        if not self.leases:
            return True
        started = self.clock.monotonic()
        ready = False
        try:
            self.ownership.announce_leaving()
            while not (ready := self.ownership.successors_ready()):
                if self.clock.monotonic() - started >= self.config.leave_wait_s:
                    break
                wait = self._step()
                self._pause(min(wait, self.config.leave_poll_s))
        except redis.RedisError:
            # The hand-over follows all the same; its new owners load at the takeover.
            logger.warning("beat.leave.unannounced", extra={"node": self.config.node_id},
                           exc_info=True)  # fmt: skip
        logger.info(
            "beat.leave.ready",
            extra={
                "node": self.config.node_id, "ready": ready,
                "waited_s": round(self.clock.monotonic() - started, 3),
            },
        )  # fmt: skip
        return ready

    def _database_lost(self, exc: Exception, failures: int) -> float:
        """The primary is gone (a failover): the next tick connects again through libpq's host
        list, soon, then backing off, so the node resumes within a fraction of a second of a
        promotion. Repeating the tick is safe: a claim whose commit was lost with the
        connection is a compare-and-set keyed by the firing's unique key, so the next claim
        re-reads those rows and inserts only what is not there; a timer or sweep repeats the
        same compare-and-sets; the fence checks run again on the new primary."""
        logger.warning(
            "beat.database_lost",
            extra={"node": self.config.node_id, "failures": failures, "error": str(exc)[:200]},
        )
        jobs_metrics.DB_RECONNECTS.labels(site="retry").inc()
        return backoff_s(failures)

    def start_lease_keeper(self) -> None:
        self._keeper.start()

    def shutdown(self) -> None:
        # Before the leases are released: the keeper must not extend a lease being let go.
        self._keeper.stop()
        try:
            self._outbox.flush()
        except DatabaseError:
            # Harmless: the new owner's sweep republishes the unmarked runs (at-least-once).
            logger.warning("beat.mark_failed", extra={"node": self.config.node_id}, exc_info=True)
        self._deferrals.flush()
        self._forget(self.ownership.release_all())
        if self.feed is not None:
            self.feed.close()
        if self._carried is not None:
            # Not claimed: the firings stay due in the database for the partitions' next owner.
            self._carried.wait()
            self._carried = None
        self.close_background()

    def close_background(self) -> None:
        """Stop the engine's helper threads (claim preparer, notices, webhooks, history purge and
        archive, live floor) and their connections; shutdown's last step, and a test's for an
        engine it ticked."""
        self._preparer.shutdown()
        self._notices.close()
        self._webhooks.close()
        self._history.close()
        self._archiver.close()
        self._floor_reader.close()

    def _before_handover(self) -> None:
        """Partitions are about to be released to a node that asked: no claim of ours is in
        flight (claims run later in the tick, and the pushes of the last one were collected),
        and the marks of what we pushed are written now, so the new owner's takeover sweep
        does not send those runs again. The fence stays the guard: the new owner's epoch_take
        waits for any claim transaction still holding the rows (no stale fence,
        docs/architecture.md, Invariants)."""
        try:
            self._outbox.collect()
            self._outbox.flush()
        except DatabaseError:
            # Harmless: the new owner sends the unmarked runs again; the worker's
            # compare-and-set drops the second message.
            logger.warning("beat.mark_failed", extra={"node": self.config.node_id}, exc_info=True)

    # --- selection --------------------------------------------------------------------------

    def _forget(self, partitions: Iterable[int]) -> None:
        gone = list(partitions)
        self.heap.drop_partitions(gone)
        self._armed.drop_partitions(gone)
        self._outbox.drop_held(gone)
        if gone and (self._backlog or self._overdue):
            dropped = frozenset(gone)
            self._backlog = [e for e in self._backlog if e.partition not in dropped]
            self._overdue = [e for e in self._overdue if e.partition not in dropped]
        for partition in gone:
            self._loaded_until.pop(partition, None)
        self._refresh_steps.forget(gone)

    def _refresh(self, now: datetime) -> None:
        """Extend the horizon, one step of a pass (beat_engine/refresh_steps.py). A pass loads
        only what lies beyond each partition's loaded_until: reloading the whole horizon
        (30,000 rows at 1,000 firings/s) stalled the loop for about 0.4 s every refresh_s, the
        steady benchmark's p99. Each pass also reloads a slice of the partitions whole
        (beat_engine/reload_turns.py), so that a change whose notification was lost is picked
        up within about full_refresh_s.
        """
        mono = self.clock.monotonic()
        # No whole reload while a backlog of due firings is being claimed: the whole horizon
        # is then the unclaimed part of the spike (200,000 rows: a 5 s stall of the loop,
        # every firing of another tenant due meanwhile waiting for it), and it would put the
        # entries already taken for the backlog back in the heap, to be claimed and refused a
        # second time. The claims' compare-and-set catches jobs changed meanwhile; the reload
        # follows the drain. Nor between two of its windows (the backlog empty, no batch
        # carried), where it would reload the unclaimed rest of the spike all the same.
        draining = bool(self._backlog) or self._carried is not None or self._draining
        if draining and self._refresh_whole:
            # A drain began during the pass: its whole reloads stop where they are (their
            # loaded_until was never lowered), and wait for their next turn.
            self._refresh_steps.forget(self._refresh_whole)
            self._refresh_whole = frozenset()
        if not self._refresh_steps.going:
            parts = list(self.leases)
            self._refresh_whole = frozenset() if draining else frozenset(
                self._reload_turns.take(parts)
            )  # fmt: skip
            self._refresh_steps.begin(parts)
            self._refresh_began_mono = mono
            self._refresh_again = False
        parts, per_partition, resume = self._refresh_steps.step()
        whole = self._refresh_whole
        after = {p: t for p, t in self._loaded_until.items() if p not in whole}
        until = now + timedelta(seconds=self.config.lookahead_s)
        page = load_horizon(parts, until=until, page=per_partition, after=after, resume=resume)
        entries = page.entries
        if self._overdue:
            # Not a second entry for a job whose overdue entry is still to be claimed.
            waiting = {e.job_id for e in self._overdue}
            entries = [e for e in entries if e.job_id not in waiting]
        self.heap.push_many(entries)
        for p, loaded in page.loaded_until.items():
            # A whole reload's full page ends before the horizon already loaded: what lies
            # between is in the heap, and the next steps reload it from where the page ended.
            before = self._loaded_until.get(p) if p in whole else None
            self._loaded_until[p] = loaded if before is None else max(before, loaded)
        self._refresh_steps.ended(page.resume)
        if self._refresh_steps.going or self._refresh_again:
            self._next_refresh_mono = mono  # the next tick goes on
        else:
            self._next_refresh_mono = self._refresh_began_mono + self.config.refresh_s

    def _stage(self, share: frozenset[int]) -> None:
        """Before joining: load the share's horizon while its owners still serve it."""
        until = self.clock.now() + timedelta(seconds=self.config.lookahead_s)
        self._staged.stage(share, until=until, page=self.config.horizon_page)

    def _load_taken(self, now: datetime, taken: list[int]) -> None:
        """Load the horizon of partitions just taken: from the staged share where it has them
        (then only what entered the horizon since, and the jobs changed meanwhile), from the
        database for the others."""
        staged = self._staged.take(taken)
        rest = [p for p in taken if p not in staged.loaded_until]
        if rest:
            self._load_near(now, rest)
        if not staged.loaded_until:
            return
        self._push_taken(now, staged.entries)
        self._loaded_until.update(staged.loaded_until)
        until = now + timedelta(seconds=self.config.lookahead_s)
        page = load_horizon(
            staged.loaded_until, until=until, page=self.config.horizon_page,
            after=staged.loaded_until,
        )  # fmt: skip
        self._push_taken(now, page.entries)
        self._loaded_until.update(page.loaded_until)
        if staged.changed:
            self._reload_jobs(staged.changed)

    def _load_near(self, now: datetime, taken: list[int]) -> None:
        """Partitions taken with nothing staged (their owner died): load only what is due
        within ``takeover_load_s`` now, so this tick's claims (the firings due while nobody
        owned them) are not held behind the whole horizon of their jobs (5,000 jobs: about
        0.4 s at 1,000 firings/s); the next tick's incremental refresh loads the rest, from
        each partition's loaded_until."""
        until = now + timedelta(seconds=self.config.takeover_load_s)
        page = load_horizon(taken, until=until, page=self.config.horizon_page)
        self._push_taken(now, page.entries)
        self._loaded_until.update(page.loaded_until)
        # The next tick's refresh loads the rest: a pass going on is followed by another.
        self._next_refresh_mono = min(self._next_refresh_mono, self.clock.monotonic())
        self._refresh_again = True

    def _push_taken(self, now: datetime, entries: Iterable[DueEntry]) -> None:
        """A taken partition's entries: those due by ``now`` are overdue, claimed first
        (_claim_due) when this node serves other partitions too; the others go to the heap."""
        for entry in entries:
            if self._overdue_first and entry.due_at <= now:
                self._overdue.append(entry)
            else:
                self.heap.push(entry)

    def _take_changes(self, changes: Changes, mono: float) -> None:
        if changes.jobs:
            # Changes to a staged share's jobs are reloaded when it is taken.
            self._staged.note(changes.jobs)
            self._reload_jobs(changes.jobs)
        if changes.timers & self.leases.keys():
            # Runs a parent's outcome just made pending (jobs/services/dag_handoff.py): queued
            # this tick, not at the next timer poll.
            self._next_timer_mono = mono

    def _reload_jobs(self, jobs: dict[uuid.UUID, int]) -> None:
        mine = [job for job, partition in jobs.items() if partition in self.leases]
        for job in mine:
            self.heap.discard(job)
        # An armed run stays (it is queued in PostgreSQL; a withdrawn one makes a message the
        # worker drops), but its job's next firing is the row's to say now.
        self._armed.forget_following(mine)
        if self._backlog or self._overdue:
            changed = frozenset(mine)
            self._backlog = [e for e in self._backlog if e.job_id not in changed]
            self._overdue = [e for e in self._overdue if e.job_id not in changed]
        self._push_within_horizon(load_jobs(mine))

    def _push_within_horizon(self, entries: Iterable[DueEntry]) -> None:
        for entry in entries:
            until = self._loaded_until.get(entry.partition)
            # Beyond the horizon the next refresh loads it: memory holds the horizon only.
            # Judged on next_fire_at, as the refresh pages: on the jittered instant, a job
            # firing inside the horizon but dispatched past it was neither kept here nor
            # loaded by the next refresh (which starts after loaded_until), until the full
            # reload up to full_refresh_s later.
            if until is not None and entry.horizon_key <= until:
                self.heap.push(entry)

    def _sleep_for(self) -> float:
        mono = self.clock.monotonic()
        wait = min(
            self.config.max_sleep_s,
            self.ownership.next_due_mono - mono,
            self._next_timer_mono - mono,
            self._next_refresh_mono - mono,
        )
        if self._outbox.held:
            wait = min(wait, self._next_release_mono - mono)
        if self._outbox.unsent:
            wait = min(wait, self._next_resend_mono - mono)
        head = self.heap.peek()
        now = self.clock.now()
        if head is not None:
            wait = min(wait, (head.due_at - now).total_seconds())
        armed = self._armed.next_due()
        if armed is not None:
            wait = min(wait, (armed - now).total_seconds())
        if self.config.claim_ahead_s and head is not None:
            # The head enters the claim-ahead window before it is due; a pass that stopped
            # for an armed instant goes on after it.
            ahead = (head.due_at - now).total_seconds() - self.config.claim_ahead_s
            wait = min(wait, max(ahead, self._next_ahead_mono - mono))
        return max(0.0, wait)

    # --- claims, timers, publish ------------------------------------------------------------

    def _claim_due(self) -> bool:
        """Claim due heap entries batch by batch; True when more were due than one tick takes.

        The loop is bounded in time as well as in count: at a steady arrival rate the heap
        always holds a few due entries, and a loop bounded only by count ran for tens of
        seconds, starving lease renewal; the leases lapsed and claimed runs were left for the
        sweep (the 30 s steady-rate outlier, docs/engine.md "Claims").

        While a backlog drains (a spike), the next batch is read and planned on a second
        thread and connection while this one's claim runs in PostgreSQL: the engine's Python
        and the database's work overlap on two cores instead of taking turns.
        """
        claimed = 0
        self._stop_claims_at = min(
            self.clock.monotonic() + self.config.max_claim_s, self.ownership.next_due_mono
        )
        # The overdue firings of partitions just taken over go first, then a batch carried
        # over from the last tick (it waits one batch, prepared meanwhile).
        current = (
            self._take_overdue(self.config.takeover_first_batch)
            or self._resume_carried()
            or self._take_batch(ahead=False)
        )
        ahead: ClaimBatch | None = None
        try:
            while current is not None:
                claimed += len(current.entries)
                # Firings that fell due since the batch in hand was cut (during the last claim,
                # or between two ticks while a carried batch waited), of tenants behind the
                # round being claimed: claimed first, in a small batch of their own, so that
                # each waits for at most the one claim that was running when it fell due
                # (beat_engine/fair_order.py, pop_behind). Before the next batch is cut: its
                # preparation would hold this one's up.
                self._claim_behind(current)
                if self._more_queued() and self._may_claim_more(claimed):
                    ahead = (
                        self._take_overdue(self.config.claim_batch, ahead=True)
                        or self._resume_carried()
                        or self._take_batch(ahead=True)
                    )
                self._commit(current)
                if ahead is None and self._may_claim_more(claimed) and not self._armed_due():
                    # No backlog: whatever fell due meanwhile (a steady arrival rate). Not once
                    # an armed run's instant has come: its push goes first, in the claim-ahead
                    # pass that follows or at the next tick's start.
                    ahead = self._take_batch(ahead=False)
                current, ahead = ahead, None
            if self._backlog and self._carried is None:
                # Those that fell due during the tick's last claim go before the carried batch
                # too, rather than after the timers, the sweep and that batch's claim.
                self._claim_behind(None)
                # Out of time with more due: the next tick's first batch is prepared while
                # this tick renews leases and fires timers, so the pipeline never drains.
                self._carried = self._take_batch(ahead=True)
        except BaseException:
            # Entries taken off the heap but not claimed go back: a failed commit leaves their
            # rows as they were. A batch whose claim committed gives nothing back (its jobs'
            # next firings are in the heap already), or a stale entry would replace them; if
            # the commit's outcome is unknown (the connection dropped at COMMIT), its entries
            # go back and the next claim re-reads the rows and puts them where they belong.
            for batch in (current, ahead):
                if batch is not None:
                    batch.wait()
                    self._give_back(batch.returnable())
            raise
        finally:
            try:
                self._outbox.collect()
            finally:
                self._preparer.release_connection(wait=self._carried is None)
        return self._more_queued() or self._head_due()

    def _more_queued(self) -> bool:
        """More than the batch in hand waits: overdue entries, a backlog or a carried batch."""
        return bool(self._overdue or self._backlog) or self._carried is not None

    def _take_overdue(self, limit: int, *, ahead: bool = False) -> ClaimBatch | None:
        """Up to ``limit`` of the overdue entries of partitions just taken over, as a batch
        (prepared now, or on the preparing thread when ``ahead``)."""
        if not self._overdue:
            return None
        due, self._overdue = self._overdue[:limit], self._overdue[limit:]
        return self._batch_of(due, ahead=ahead)

    def _resume_carried(self) -> ClaimBatch | None:
        """The batch prepared at the end of the last tick, if its partitions are still ours
        under the same epochs; otherwise its entries go back to the heap."""
        carried, self._carried = self._carried, None
        if carried is None:
            return None
        epochs = self.ownership.usable_epochs(self.clock.monotonic())
        if all(
            epochs.get(p) == carried.epochs.get(p) for p in {e.partition for e in carried.entries}
        ):
            return carried
        carried.wait()
        self._give_back(carried.entries)
        return None

    def _may_claim_more(self, claimed: int) -> bool:
        return (
            claimed < self.config.max_claims_per_tick
            and self.clock.monotonic() < self._stop_claims_at
            # A hand-over (or a node asking for one) is served by the next tick's rebalance:
            # at a steady rate the claim loop runs its whole max_claim_s, which the partitions
            # changing hands would wait for, with nobody claiming them.
            and not (self.feed is not None and self.feed.membership_changed())
        )

    def _armed_due(self) -> bool:
        armed = self._armed.next_due()
        return armed is not None and armed <= self.clock.now()

    def _claim_behind(self, preparing: ClaimBatch | None) -> None:
        """Claim and push, now, the due firings of tenants behind the round being claimed,
        while a backlog drains (a steady rate has none: its batches take whatever is due)."""
        if not (self._backlog or self._draining):
            return
        now = self.clock.now()
        due = self.heap.pop_behind(now, self.config.claim_batch)
        if not due:
            return
        self.heap.claiming(due)
        # Prepared on this thread once the batch being prepared on the other is: one
        # preparation at a time uses the tenant allowances.
        if preparing is not None:
            preparing.wait()
        behind = self._take_batch(ahead=False, due=due, now=now)
        if behind is not None:
            self._commit_or_give_back(behind)

    def _take_batch(
        self, *, ahead: bool, due: list[DueEntry] | None = None, now: datetime | None = None
    ) -> ClaimBatch | None:
        mono = self.clock.monotonic()
        if now is None:
            now = self.clock.now()
        if due is None:
            due = self._next_batch(now)
        if not due:
            return None
        return self._batch_of(due, ahead=ahead, mono=mono, now=now)

    def _batch_of(
        self,
        due: list[DueEntry],
        *,
        ahead: bool,
        mono: float | None = None,
        now: datetime | None = None,
        until: datetime | None = None,
    ) -> ClaimBatch | None:
        mono = self.clock.monotonic() if mono is None else mono
        now = self.clock.now() if now is None else now
        epochs = self.ownership.usable_epochs(mono)
        if any(e.partition not in epochs for e in due):
            # A held lease past its local deadline: give the entries back and let the next
            # tick renew (or lose) it, instead of dropping them from the heap unclaimed.
            self._give_back([e for e in due if e.partition not in epochs])
            due = [e for e in due if e.partition in epochs]
            self._stop_claims_at = mono
        if not due:
            return None
        if not ahead:
            try:
                prepared = self._prepare(due, epochs, now, until)
                return ClaimBatch(due, epochs, now, prepared=prepared)
            except BaseException:
                self._give_back(due)
                raise
        future = self._preparer.submit(self._prepare, due, epochs, now)
        return ClaimBatch(due, epochs, now, future=future)

    def _prepare(
        self,
        due: list[DueEntry],
        epochs: dict[int, int],
        now: datetime,
        until: datetime | None = None,
    ) -> Prepared:
        prepared = prepare_claim(
            due, epochs=epochs, now=now, quotas=self._quotas, mono=self.clock.monotonic(),
            until=until,
        )  # fmt: skip
        # Rendered before the claim commits (a run the claim does not insert wastes one
        # render), so that on the preparing thread the rendering overlaps the previous claim.
        return prepared, self._outbox.render(list(prepared.batch.queued.values()), epochs)

    def _next_batch(self, now: datetime) -> list[DueEntry]:
        """The next claim batch: earliest first, or tenant round-robin when more than one
        batch is due (docs/engine.md "Fairness and tenant limits")."""
        size = self._sizer.size()
        if not self._backlog:
            if self._draining:
                # Between two windows of a drain, or past its last: a firing that fell due
                # during the last claim goes on its own, not in the next window's first batch.
                behind = self.heap.pop_behind(now, size)
                if behind:
                    self.heap.claiming(behind)
                    return behind
            due = self.heap.pop_due(now, size)
            if len(due) < size or not self._head_due():
                self._draining = False
                self.heap.claiming(due)
                return due
            self._draining = True
            due += self.heap.pop_due(now, self.config.fair_window - size)
            # Highest priority first, with the reserved share for the lowest, then tenant
            # round-robin: a tenant's priorities order its own turns and those within a round,
            # never more turns than other tenants get (docs/limits.md, "Priorities").
            due = order_by_priority(due, priority_of=_priority, share=self._claim_turns)
            self._backlog = interleave_by_tenant(due)
        # A firing that fell due after the window was taken (another tenant's, or a tenant
        # behind the round) is not put in the window's next batch, which it would wait for as
        # well as for the claim in hand: _claim_behind claims it on its own before that batch.
        batch, self._backlog = self._backlog[:size], self._backlog[size:]
        # The claims reach these entries' rounds: a tenant served less than that is behind
        # again, so each of a lone tenant's firings is claimed on its own as it falls due.
        self.heap.claiming(batch)
        return batch

    def _give_back(self, entries: Iterable[DueEntry]) -> None:
        self.heap.push_many(e for e in entries if e.partition in self.leases)

    def _commit_or_give_back(self, batch: ClaimBatch) -> None:
        """Commit a batch claimed on its own; if that fails, what it holds goes back."""
        try:
            self._commit(batch)
        except BaseException:
            self._give_back(batch.returnable())
            raise

    def _commit(self, batch: ClaimBatch) -> None:
        started = self.clock.monotonic()
        self._claim(batch)
        # What a firing falling due now would wait for: this batch's preparation (if still
        # running), claim and push (a failed claim says how long an outage lasted, not a row).
        self._sizer.observed(len(batch.entries), self.clock.monotonic() - started)

    def _claim(self, batch: ClaimBatch) -> None:
        prepared, rendered = batch.settle()
        with metrics.CLAIM_DURATION.time():
            result = commit_claim(prepared, epochs=batch.epochs, now=batch.now)
        batch.committed, batch.reloading = True, frozenset(result.refused)
        due = batch.entries
        self._push_within_horizon(self._arm(result, rendered, now=batch.now))
        if result.deferred_firings:
            self._deferrals.add(result.deferred_firings, now=batch.now)
            metrics.count_deferrals(tenant for _job, tenant, _p, _due in result.deferred_firings)
        self._fenced(result.fenced_out)
        if result.refused:
            # Changed under the claim (edited, paused): their rows now say when they are due.
            self._push_within_horizon(load_jobs(result.refused))
            batch.reloading = frozenset()
        sendable, epochs = self._sendable(result.queued)
        if batch.future is not None:
            # Pushed on the preparing thread while the next batch's claim runs; the outbox
            # waits for it before the tick ends.
            sent = self._outbox.send_on(
                self._preparer.executor, sendable, epochs, rendered, since=batch.now
            )
        else:
            sent = self._outbox.send(sendable, epochs, rendered, since=batch.now)
        metrics.count(metrics.FIRINGS_CLAIMED, result.claimed)
        metrics.count(metrics.FIRINGS_MISSED, result.missed)
        logger.info(
            "beat.claim",
            extra={
                "node": self.config.node_id,
                "due": len(due),
                "claimed": result.claimed,
                "sent": sent,
                "missed": result.missed,
                "pending": result.pending,
                "deferred": result.deferred,
                "refused": len(result.refused),
            },
        )

    # --- claim ahead (docs/engine.md, "Claim ahead") ----------------------------------------

    def _arm(self, result: ClaimResult, rendered: Rendered, *, now: datetime) -> list[DueEntry]:
        """Hold the runs a claim queued for a later instant, each with its job's next firing;
        ``result.queued`` keeps the runs due now. Returns the next firings for the heap."""
        later = [r for r in result.queued if r.due_at is not None and r.due_at > now]
        if not later:
            return result.next_due
        following = {entry.job_id: entry for entry in result.next_due}
        # A spike's messages go to the broker now, into staging lists, and are only moved at
        # the instant (beat_engine/broker_staging.py); the claim has committed, so a staged
        # message is always of a run on record.
        staged = (
            self._outbox.stage(later, rendered, min_runs=self.config.stage_min_runs)
            if self.config.stage_min_runs
            else {}
        )
        for run in later:
            job = result.job_of_run[run.run_id]
            group = staged.get(run.run_id)
            # A staged run's message is in Redis: not kept here too (about 1 KB a run). If its
            # group cannot be moved, the push renders it again.
            message = rendered.get(run.run_id) if group is None else None
            self._armed.arm(run, job, message, following.pop(job, None), group)
        armed = {run.run_id for run in later}
        result.queued = [r for r in result.queued if r.run_id not in armed]
        return list(following.values())

    def _push_armed(self) -> None:
        """Push the armed runs whose instant has come, fenced as every push is (no stale
        fence, docs/architecture.md, Invariants); their jobs' next firings enter the heap."""
        now = self.clock.now()
        started = self.clock.monotonic()
        due = self._armed.pop_due(now)
        runs = due.runs
        if not runs:
            return
        try:
            sent = self._publish(runs, due.rendered, since=runs[0].due_at, staged=due.staged)
        finally:
            # After the push, failed or not: the jobs' next firings are not due for a while
            # yet, and at a spike's instant every firing waits for the push.
            pushed = self.clock.monotonic()
            following = self._armed.release(due)
            if following:
                self._push_within_horizon(following)
        assert runs[0].due_at is not None
        logger.info(
            "beat.armed_push",
            extra={
                "node": self.config.node_id, "runs": len(runs), "sent": sent,
                # How late the push began after the earliest run's instant, and how long it
                # took: the two parts of the last firing's lateness.
                "late_s": round((now - runs[0].due_at).total_seconds(), 4),
                "push_s": round(pushed - started, 4),
            },
        )  # fmt: skip

    def _claim_ahead(self) -> None:
        """Claim the firings due within claim_ahead_s now, earliest first, batch by batch, for
        at most max_claim_s, pushing the armed runs whose instant comes meanwhile, so that at
        each instant only the push is left (docs/engine.md, "Claim ahead").

        It runs whenever no backlog drains, also while firings are due: the earliest first,
        those are in its first batches, claimed as at their instant. A pass that waited for
        nothing to be due never ran again once a stream's firings fell due before their claim
        ahead, and each later one was claimed at its instant (docs/engine.md, "A node that falls
        behind a stream gets ahead again")."""
        lead = self.config.claim_ahead_s
        mono = self.clock.monotonic()
        if not lead or self._more_queued() or self._draining:
            return
        if mono < self._next_ahead_mono:
            return
        stop = min(mono + self.config.max_claim_s, self.ownership.next_due_mono)
        pushed = False
        while (mono := self.clock.monotonic()) < stop:
            now = self.clock.now()
            size = self._sizer.size()
            armed = self._armed.next_due()
            if armed is not None:
                until_push = (armed - now).total_seconds()
                if until_push <= 0 and not pushed:
                    # An armed instant came during the pass: its push, then a batch (below,
                    # within the slack), then the next push. Under a steady stream one falls
                    # due every few milliseconds: a pass that ended there claimed nothing ahead
                    # once it had fallen behind, and one that pushed whenever a run was due
                    # pushed one run at a time and never claimed.
                    self._push_armed()
                    pushed = True
                    continue
                pushed = False
                # A batch must end before the next armed push: by the last batches' time per
                # row, with a margin for the push itself. Under a steady stream an armed push
                # is due every few milliseconds and no batch would fit before it: one may
                # delay it by up to the slack instead.
                room = max(until_push - _ARMED_MARGIN_S, self.config.claim_ahead_slack_s)
                per_row = self._sizer.per_row_s
                fits = int(room / per_row) if per_row else size
                if room <= 0 or fits < 1:
                    self._next_ahead_mono = mono + until_push
                    return
                size = min(size, fits)
            until = now + timedelta(seconds=lead)
            entries = self.heap.pop_due(until, size)
            if not entries:
                return
            self.heap.claiming(entries)
            batch = self._batch_of(entries, ahead=False, now=now, until=until)
            if batch is None:
                return
            self._commit_or_give_back(batch)
        self._next_ahead_mono = mono

    def _arm_taken(self, now: datetime, taken: Sequence[int]) -> None:
        """Arm the runs the last owner of ``taken`` claimed ahead and had not pushed: queued
        from their instant on, they would otherwise wait for the sweep, publish_sweep_after_s
        past it."""
        if not self.config.claim_ahead_s:
            return
        epochs = self.ownership.usable_epochs(self.clock.monotonic())
        parts = sorted(set(taken) & epochs.keys())
        found = claimed_ahead(parts, now=now, limit=_ARM_TAKEN_MAX)
        if not found:
            return
        rendered = self._outbox.render([run for run, _job in found], epochs)
        for run, job in found:
            self._armed.arm(run, job, rendered.get(run.run_id))
        logger.info("beat.armed_taken", extra={"node": self.config.node_id, "runs": len(found)})

    def _head_due(self) -> bool:
        head = self.heap.peek()
        return head is not None and head.due_at <= self.clock.now()

    def _record_duties(self, mono: float) -> None:
        """Decision reasons and notifications, each at its own period."""
        if mono >= self._next_deferrals_mono:
            self._deferrals.flush()
            self._next_deferrals_mono = mono + _DEFERRALS_FLUSH_S
        if mono >= self._next_purge_mono:
            self._purge_reasons(self.clock.now())
            self._next_purge_mono = mono + _REASONS_PURGE_S
        if mono >= self._next_webhooks_mono:
            self._notify(mono)
            self._next_webhooks_mono = mono + _WEBHOOKS_POLL_S
        if mono >= self._next_history_mono and 0 in self.leases:
            self._history.request()
            self._next_history_mono = mono + self.config.history_purge_s
        if mono >= self._next_archive_mono and 0 in self.leases:
            self._archiver.request()
            self._next_archive_mono = mono + self.config.history_archive_s

    def _notify(self, mono: float) -> None:
        # The sustained-lateness check reads every tenant's recent runs: one node does it, the
        # holder of partition 0; two holders during a handover record one alert per window all
        # the same (its unique key).
        if mono >= self._next_lateness_mono and 0 in self.leases:
            # Done on the delivery thread: the check reads a window of runs, too long a
            # wait for the tick.
            self._webhooks.request_lateness_check()
            self._next_lateness_mono = mono + _LATENESS_CHECK_S
        self._webhooks.poll()

    def _purge_reasons(self, now: datetime) -> None:
        deleted = reasons_purge(now=now)
        if any(deleted.values()):
            logger.info("beat.reasons_purged", extra={"node": self.config.node_id, **deleted})

    def _fire_timers(self, now: datetime) -> bool:
        """Fire due timers, batch after batch while each comes back full, for at most
        max_claim_s; True when the last batch was full (more may be waiting).

        10,000 children made pending by one parent took ten ticks at one batch per tick,
        each tick also writing the last batch's published marks: the drain ran at the tick's
        pace. In one loop the marks wait until the set is drained (the outbox's flush in the
        next tick), a full batch is followed by a larger one, up to _TIMER_BATCH_GROWTH x
        claim_batch, so fewer fenced transactions carry the set, and a batch followed by
        another is pushed on the preparing thread while the next one's UPDATE runs."""
        limit = self.config.claim_batch
        deadline = min(self.clock.monotonic() + self.config.max_claim_s,
                       self.ownership.next_due_mono)  # fmt: skip
        try:
            while True:
                fired = self._fire_timer_batch(now, limit, deadline=deadline)
                if fired < limit or self.clock.monotonic() >= deadline:
                    return fired >= limit
                limit = min(limit * 2, self.config.claim_batch * _TIMER_BATCH_GROWTH)
                # The database clock's instant for the next batch: never early (due_at by it).
                now = self.clock.now()
        finally:
            self._outbox.collect()

    def _next_timer_pass(self) -> float:
        mono = self.clock.monotonic()
        wait = self.config.timer_poll_s
        if self._timer_next_due is not None:
            until = (self._timer_next_due - self.clock.now()).total_seconds()
            wait = max(0.0, min(wait, until))
        return mono + wait

    def _fire_timer_batch(self, now: datetime, limit: int, *, deadline: float) -> int:
        """One fenced timer transaction of at most ``limit`` due runs; how many it fired."""
        self._timer_next_due = None
        epochs = self.ownership.usable_epochs(self.clock.monotonic())
        if not epochs:
            return 0
        mono = self.clock.monotonic()
        if self._live_floor.due(mono):
            self._floor_reader.request()
        since = self._live_floor.since(mono)
        result = fire_timers(epochs, now=now, limit=limit, since=since)
        self._timer_next_due = result.next_due
        self._notices.offer(result.dead_runs, now=now)
        self._fenced(result.fenced_out)
        if result.fired >= limit and self.clock.monotonic() < deadline:
            # Another batch follows: pushed meanwhile, waited for (collect) before the loop
            # ends. Fenced here, on this thread, as every push is (no stale fence,
            # docs/architecture.md, Invariants).
            sendable, held = self._sendable(result.queued)
            published = self._outbox.send_on(self._preparer.executor, sendable, held, since=now)
        else:
            published = self._publish(result.queued, since=now)
        metrics.count(metrics.TIMERS_FIRED, result.fired)
        metrics.count(metrics.RUNS_REAPED, result.reaped)
        metrics.count(metrics.RUNS_DEAD, result.dead)
        if result.fired or result.reaped or result.dead:
            logger.info(
                "beat.timers",
                extra={
                    "node": self.config.node_id,
                    "fired": result.fired,
                    "reaped": result.reaped,
                    "dead": result.dead,
                    # Handed to the broker; a push on the preparing thread logs its outcome
                    # (beat.publish) when it is done.
                    "published": published,
                },
            )
        return result.fired

    def _sweep(
        self,
        now: datetime,
        *,
        only: Iterable[int] | None = None,
        unpublished_after: timedelta | None = None,
    ) -> None:
        epochs = self.ownership.usable_epochs(self.clock.monotonic())
        partitions = sorted(epochs if only is None else set(only) & epochs.keys())
        if unpublished_after is None:
            unpublished_after = timedelta(seconds=self.config.publish_sweep_after_s)
        if only is None and self._outbox.released_unmarked:
            # Runs released from the hold since the last marks were queued long ago: marked
            # first, or this sweep would take them for lost and send them again.
            self._outbox.flush()
        oldest_held = self._outbox.held.oldest_since()
        if only is None and oldest_held is not None:
            # Runs held back at a queue's bound are unpublished but not lost: the periodic
            # sweep looks only at runs queued before the oldest of them (a takeover's sweep
            # looks at partitions just gained, whose runs this node holds none of).
            unpublished_after = max(unpublished_after, now - oldest_held + _MICROSECOND)
        for _ in range(_SWEEP_BATCHES_PER_TICK):
            found = sweep_lost_publishes(
                partitions,
                now=now,
                unpublished_after=unpublished_after,
                republish_after=timedelta(seconds=self.config.republish_after_s),
                limit=self.config.claim_batch,
                since=self._live_floor.since(self.clock.monotonic()),
            )
            swept = len(found)
            # Held back here (sent again earlier, and at the bound), or to be sent again after a
            # failed push: not lost.
            found = [f for f in found if not self._outbox.waiting_here(f.run.run_id)]
            # Only runs whose message is gone; those still waiting in the broker are re-stamped.
            runs = self._outbox.lost(found, now=now)
            published = 0
            if runs:
                published = self._publish(runs)
                # At once: a republished run left unmarked would match the next sweep again.
                self._outbox.flush()
                metrics.count(metrics.RUNS_REPUBLISHED, published)
                logger.info(
                    "beat.republish", extra={"node": self.config.node_id, "runs": published}
                )
            if swept < self.config.claim_batch or not found or (runs and not published):
                break

    def _publish(
        self,
        runs: Sequence[QueuedRun],
        rendered: Rendered | None = None,
        *,
        since: datetime | None = None,
        staged: Sequence[StagedGroup] = (),
    ) -> int:
        sendable, epochs = self._sendable(runs)
        return self._outbox.send(sendable, epochs, rendered, since=since, staged=staged)

    def _release_held(self) -> None:
        """Push the held runs their queues have room for now, fenced as every push is (no
        stale fence, docs/architecture.md, Invariants); a run fenced out is its partition's
        new owner's to send."""
        runs = self._outbox.release_held()
        if runs:
            sendable, epochs = self._sendable(runs)
            self._outbox.send(sendable, epochs, admitted=True)

    def _resend_unsent(self) -> None:
        """Send again the runs whose push the broker refused, fenced as every push is (no
        stale fence, docs/architecture.md, Invariants): a broker back from a restart gets them
        at once, not a sweep period later; if it is still away they wait for the next resend."""
        runs, since = self._outbox.unsent_runs()
        sendable, epochs = self._sendable(runs)  # kept for the next resend if this raises
        self._outbox.clear_unsent()
        self._outbox.send(sendable, epochs, since=since)

    def _sendable(self, runs: Sequence[QueuedRun]) -> tuple[list[QueuedRun], dict[int, int]]:
        if not runs:
            return [], {}
        # Every held lease, usable by local reckoning or not: the runs were claimed under a
        # fence, and whether their partition is still ours is PostgreSQL's to say (below).
        # Skipping a held-but-lapsing lease here once left committed runs to the 30 s sweep.
        held = {p: lease.epoch for p, lease in self.leases.items()}
        mine = {p: held[p] for p in {r.partition for r in runs} if p in held}
        # No stale fence (docs/architecture.md, Invariants): a node paused between its claim
        # and this push may have been replaced; it then publishes nothing and leaves the runs
        # to the new owner's sweep.
        current = epochs_current(mine)
        self._fenced(FencedOut(frozenset(mine) - current))
        return [r for r in runs if r.partition in current], mine

    def _fenced(self, fenced: FencedOut | None) -> None:
        if fenced is None or not fenced.partitions:
            return
        dropped = self.ownership.drop(fenced.partitions)
        self._forget(dropped)
        metrics.count(metrics.FENCED, len(fenced.partitions))
        logger.warning(
            "beat.fenced",
            extra={"node": self.config.node_id, "partitions": sorted(fenced.partitions)},
        )


def _priority(entry: DueEntry) -> int:
    return entry.priority
