"""Outbox: pushes claimed runs to the broker, now or on the preparing thread, and marks them."""

from __future__ import annotations

import logging
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor, Future
from datetime import datetime

import redis

from beat_engine import metrics
from beat_engine.backpressure import HeldRuns, QueueRoom
from beat_engine.broker_staging import StagedGroup
from beat_engine.clock import Clock
from beat_engine.drain_bound import DEFAULT_FLOOR, DrainBound
from beat_engine.priority_order import DEFAULT_SHARE
from beat_engine.publisher import Publisher, Pushed, QueuedRun, Rendered, mark_published
from beat_engine.sweep import Swept

logger = logging.getLogger("beat_engine")

# At most this many runs wait in memory to be sent again after a failed push; past it, the
# sweep finds the rest in PostgreSQL (about 200 bytes each: 20 MB at the bound).
_UNSENT_MAX = 100_000
# Most marks one tick writes while none is older than mark_within_s. After the push of a
# spike claimed ahead, the marks of 25,000 runs written at once stalled the loop for 2.6-2.8 s,
# every firing due meanwhile waiting (bench/bench_scale.py); at that rate a thousand take 0.1 s.
_MARKS_PER_TICK = 1000


class Outbox:
    """Runs already fenced for sending: pushed, recorded, and marked published later.

    The mark is a hint for the sweep: it waits while a spike drains, at most ``mark_within_s``
    (see flush_due), and a crash before it only means the runs are sent again (at least once).
    """

    def __init__(
        self,
        *,
        publisher: Publisher,
        clock: Clock,
        node_id: str,
        mark_within_s: float,
        queue_bound: int = 0,
        queue_target_wait_s: float = 0.0,
        queue_min_bound: int = DEFAULT_FLOOR,
        low_priority_share: float = float(DEFAULT_SHARE),
    ) -> None:
        self._publisher = publisher
        # Below the fixed bound, each queue's bound follows its drain rate (a wait of about
        # queue_target_wait_s behind it, beat_engine/drain_bound.py); 0: the fixed bound only.
        self._drain: DrainBound | None = None
        if queue_bound > 0 and queue_target_wait_s > 0:
            self._drain = DrainBound(
                cap=queue_bound, target_wait_s=queue_target_wait_s, floor=queue_min_bound
            )
        # Backpressure (beat_engine/backpressure.py): runs held back while their queue is at
        # its bound, touched on the engine's thread only (send, send_on and release run there).
        self._room = QueueRoom(queue_bound, self._drain.bound if self._drain else None)
        # Messages pushed per queue, counted when the push returned (on whichever thread ran
        # it): the drain rate's "pushed since the last reading". Counted at the admission
        # instead, a push still in flight at a reading would count as drained.
        self._landed: Counter[str] = Counter()
        self._landed_lock = threading.Lock()
        # Runs that had been held were pushed and are not marked yet: queued long ago, they
        # would look lost to the sweep's unpublished branch, which flushes the marks first.
        self.released_unmarked = False
        self.held: HeldRuns[QueuedRun] = HeldRuns(low_priority_share)
        self._clock = clock
        self._node_id = node_id
        self._mark_within_s = mark_within_s
        # Runs whose push the broker refused (it is down or restarting): sent again at the
        # engine's next resend, fenced again first, instead of publish_sweep_after_s later by
        # the sweep (which skips them meanwhile); up to _UNSENT_MAX, the rest are the sweep's
        # (Redis is a hint, docs/architecture.md, Invariants).
        self._unsent: dict[uuid.UUID, tuple[QueuedRun, datetime | None]] = {}
        # Pushed runs awaiting their published mark, and when the oldest was pushed.
        self._unmarked: list[tuple[float, Pushed]] = []
        # Pushes handed to another thread, and how many runs each carries.
        self._in_flight: list[tuple[Future[Pushed], list[QueuedRun], datetime | None]] = []

    def render(self, runs: Sequence[QueuedRun], epochs: Mapping[int, int]) -> Rendered:
        return self._publisher.render(runs, epochs)

    def send(
        self,
        runs: list[QueuedRun],
        epochs: dict[int, int],
        rendered: Rendered | None = None,
        *,
        since: datetime | None = None,
        admitted: bool = False,
        staged: Sequence[StagedGroup] = (),
    ) -> int:
        """Push now what the queues' bounds let through (the rest is held back; ``since``: an
        instant at or before the runs' queued_at; ``admitted``: released by release_held, let
        through already; ``staged``: groups whose messages wait in staging lists,
        beat_engine/broker_staging.py); returns how many runs went out (0 if the broker
        refused them)."""
        if not admitted:
            runs = self._admit(runs, since)
        if not runs:
            self._discard(staged)
            return 0
        return self._record(lambda: self._push(runs, epochs, rendered, staged), runs, since)

    def stage(
        self, runs: Sequence[QueuedRun], rendered: Rendered, *, min_runs: int
    ) -> dict[uuid.UUID, StagedGroup]:
        """Stage the messages of the groups of runs armed for one instant (at least
        ``min_runs`` to a broker list); if the broker refuses, nothing is staged and the runs
        are pushed at their instant as any run."""
        try:
            return self._publisher.stage(runs, rendered, min_runs=min_runs)
        except redis.RedisError:
            logger.warning("beat.stage_failed", extra={"runs": len(runs)}, exc_info=True)
            return {}

    def _discard(self, staged: Sequence[StagedGroup]) -> None:
        """Staging lists no run will be moved from: deleted now rather than at their expiry."""
        if staged:
            try:
                self._publisher.discard(staged)
            except redis.RedisError:
                logger.debug("beat.discard_failed", exc_info=True)

    def send_on(
        self,
        executor: Executor,
        runs: list[QueuedRun],
        epochs: dict[int, int],
        rendered: Rendered | None = None,
        *,
        since: datetime | None = None,
    ) -> int:
        """Push on ``executor``'s thread what the queues' bounds let through (returns how many
        runs that is); collect() waits for it and records the outcome."""
        runs = self._admit(runs, since)
        if runs:
            future = executor.submit(self._push, runs, epochs, rendered)
            self._in_flight.append((future, runs, since))
        return len(runs)

    def collect(self) -> None:
        """Wait for every push handed to another thread; re-raise the first unexpected error."""
        in_flight, self._in_flight = self._in_flight, []
        failure: BaseException | None = None
        for future, runs, since in in_flight:
            try:
                self._record(future.result, runs, since)
            except BaseException as exc:  # noqa: BLE001 - every push is waited for first
                failure = failure or exc
        if failure is not None:
            raise failure

    def flush_due(self, *, draining: bool) -> None:
        """Write marks, oldest first: none while a spike is still draining, at most
        _MARKS_PER_TICK a tick otherwise, and all of them once the oldest was pushed
        mark_within_s ago (the sweep must never take a pushed run for lost).

        At a steady rate, holding marks for mark_within_s and writing thousands at once
        stalled the loop (steady p99 0.04 s -> 0.5 s, benchmarked): there they are written
        every tick, as small as they come."""
        if not self._unmarked:
            return
        if self._clock.monotonic() - self._unmarked[0][0] >= self._mark_within_s:
            self.flush()
        elif not draining:
            self._flush_oldest(_MARKS_PER_TICK)

    def flush(self) -> None:
        """Mark every pushed run published, with the instant it was pushed, in one
        transaction. Deferred while a spike drains (a spike's 50,000 marks cost about a tenth
        of its claim+publish time, profiled); a crash before it only means the sweep publishes
        those runs again, and the worker's compare-and-set drops the duplicates."""
        if self._unmarked:
            mark_published([pushed for _mono, pushed in self._unmarked])
            self._unmarked = []
        self.released_unmarked = False

    def _flush_oldest(self, limit: int) -> None:
        batches: list[Pushed] = []
        whole = 0  # entries of _unmarked written whole
        taken = 0
        rest: tuple[float, Pushed] | None = None
        for mono, pushed in self._unmarked:
            room = limit - taken
            if room <= 0:
                break
            if len(pushed.run_ids) > room:
                batches.append(Pushed(pushed.published_at, pushed.run_ids[:room]))
                rest = (mono, Pushed(pushed.published_at, pushed.run_ids[room:]))
                break
            batches.append(pushed)
            whole += 1
            taken += len(pushed.run_ids)
        # Written before they leave the list: a failed write keeps them for the next flush.
        mark_published(batches)
        del self._unmarked[:whole]
        if rest is not None:
            self._unmarked[0] = rest
        if not self._unmarked:
            self.released_unmarked = False

    def sample_queue_depth(self) -> None:
        try:
            self._publisher.sample_queue_depth()
        except redis.RedisError:
            # A gauge left at its last value; the broker's outage shows in engine errors.
            logger.debug("beat.queue_depth_failed", exc_info=True)

    def _admit(self, runs: list[QueuedRun], since: datetime | None) -> list[QueuedRun]:
        """The runs that fit below their queue's bound; the others are held back, and the
        held runs of a queue that has room go first, in fair order."""
        if not runs or not self._room.enabled:
            return runs
        wanted = Counter(run.queue for run in runs)
        check = [q for q, n in wanted.items() if self.held.waiting(q) or self._room.must_read(q, n)]
        if check:
            try:
                depths = self._publisher.queue_depths(check)
            except redis.RedisError:
                # The push that follows fails the same way and is logged (the sweep sends).
                logger.warning("beat.queue_depth_failed", exc_info=True)
                return runs
            for queue in check:
                self._observed(queue, depths[queue])
        admitted: list[QueuedRun] = []
        for queue in wanted:
            group = [run for run in runs if run.queue == queue] if len(wanted) > 1 else runs
            if self.held.waiting(queue) or len(group) > self._room.room(queue):
                held = self.held.hold(group, since=since)
                metrics.count_held_back(queue, held)
                group = self.held.release(queue, self._room.room(queue))
                self.released_unmarked = self.released_unmarked or bool(group)
            self._room.pushed(queue, len(group))
            admitted.extend(group)
        if self.held:
            metrics.set_held(self.held)
        return admitted

    def _observed(self, queue: str, depth: int) -> None:
        self._room.observed(queue, depth)
        if self._drain is not None:
            with self._landed_lock:
                pushed = self._landed[queue]
            bound = self._drain.observed(
                queue, depth=depth, pushed=pushed, mono=self._clock.monotonic(),
                holding=self.held.waiting(queue),
            )  # fmt: skip
            metrics.set_queue_bound(queue, bound)

    def release_held(self) -> list[QueuedRun]:
        """Held runs whose queue has room now, in fair order, counted as pushed: the caller
        fences them and sends them with ``admitted=True``."""
        queues = self.held.queues()
        if not queues:
            return []
        try:
            depths = self._publisher.queue_depths(queues)
        except redis.RedisError:
            logger.warning("beat.queue_depth_failed", exc_info=True)
            return []
        released: list[QueuedRun] = []
        for queue in queues:
            self._observed(queue, depths[queue])
            out = self.held.release(queue, self._room.room(queue))
            self.released_unmarked = self.released_unmarked or bool(out)
            self._room.pushed(queue, len(out))
            released.extend(out)
        metrics.set_held(self.held, queues)
        return released

    @property
    def unsent(self) -> int:
        """How many runs wait to be sent again after the broker refused their push."""
        return len(self._unsent)

    def waiting_here(self, run_id: uuid.UUID) -> bool:
        """Held back at a queue's bound, or waiting to be sent again: not lost (the sweep)."""
        return run_id in self.held or run_id in self._unsent

    def unsent_runs(self) -> tuple[list[QueuedRun], datetime | None]:
        """The runs to send again, and an instant at or before their queued_at (None when a
        sweep's run is among them); the caller fences them, then calls clear_unsent and sends
        them with ``send`` (a failed push keeps them again)."""
        known = [since for _run, since in self._unsent.values() if since is not None]
        since = min(known) if known and len(known) == len(self._unsent) else None
        return [run for run, _since in self._unsent.values()], since

    def clear_unsent(self) -> None:
        self._unsent = {}

    def drop_held(self, partitions: Sequence[int]) -> None:
        """Partitions no longer ours: their held and unsent runs are the next owner's to send."""
        if self._unsent and partitions:
            gone = frozenset(partitions)
            self._unsent = {k: v for k, v in self._unsent.items() if v[0].partition not in gone}
        if self.held and partitions:
            queues = self.held.queues()
            self.held.drop_partitions(partitions)
            metrics.set_held(self.held, queues)

    def lost(self, found: Sequence[Swept], *, now: datetime) -> list[QueuedRun]:
        """Of the runs the sweep found unstarted, those whose message is gone: never marked
        published, or no longer waiting in the broker (beat_engine/broker_ledger.py).

        The others wait behind a backlog or a worker outage. They are not sent again but
        re-stamped, published_at = now, so the sweep looks at them once per
        republish_after_s: one message per queued run however long the wait (bounded
        redelivery, docs/architecture.md, Invariants)."""
        sent = [s for f in found if (s := f.sent()) is not None]
        waiting: dict[datetime, set[uuid.UUID]] = {}
        if sent:
            try:
                waiting = self._publisher.ledger.waiting(sent, restamp_at=now)
            except redis.RedisError:
                # The broker cannot be read, so nothing could be sent to it either.
                logger.warning("beat.ledger_failed", extra={"runs": len(sent)}, exc_info=True)
                return []
        if waiting:
            mark_published(
                [Pushed(at, tuple(ids)) for at, ids in sorted(waiting.items())], restamp=True
            )
            logger.info(
                "beat.still_waiting",
                extra={"node": self._node_id, "runs": sum(len(ids) for ids in waiting.values())},
            )
        held = set().union(*waiting.values())
        return [f.run for f in found if f.run.run_id not in held]

    def _push(
        self,
        runs: list[QueuedRun],
        epochs: dict[int, int],
        rendered: Rendered | None,
        staged: Sequence[StagedGroup] = (),
    ) -> Pushed:
        pushed = self._publisher.publish(
            runs, epochs=epochs, now=self._now, rendered=rendered, staged=staged
        )
        if self._drain is not None and pushed.run_ids:
            landed = Counter(run.queue for run in runs)
            with self._landed_lock:
                self._landed.update(landed)
        return pushed

    def _now(self) -> datetime:
        return self._clock.now()

    def _record(
        self, outcome: Callable[[], Pushed], runs: list[QueuedRun], since: datetime | None
    ) -> int:
        try:
            pushed = outcome()
        except redis.RedisError:
            # The runs stay queued and unpublished in the database; they are sent again at the
            # engine's next resend (a broker restart costs its outage, not a sweep period).
            room = _UNSENT_MAX - len(self._unsent)
            for run in runs[: max(0, room)]:
                self._unsent[run.run_id] = (run, since)
            logger.warning(
                "beat.publish_failed",
                extra={"runs": len(runs), "unsent": len(self._unsent)},
                exc_info=True,
            )
            return 0
        if pushed.run_ids:
            self._unmarked.append((self._clock.monotonic(), pushed))
        published = len(pushed.run_ids)
        metrics.count(metrics.RUNS_PUBLISHED, published)
        logger.info("beat.publish", extra={"node": self._node_id, "runs": published})
        return published
