"""Pipelined publish of Celery protocol-2 messages straight into the Redis broker lists."""

from __future__ import annotations

import base64
import json
import logging
import os
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import redis
from django.db import transaction

from beat_engine import metrics
from beat_engine.broker_ledger import BrokerLedger
from beat_engine.broker_staging import StagedGroup, Stager
from beat_engine.fencing import server_cursor
from beat_engine.pg_arrays import uuid_array
from beat_engine.priority_order import BROKER_STEPS, HIGHEST, LOWEST
from jobs.states import RunState

logger = logging.getLogger("beat_engine")

EXECUTE_TASK = "jobs.execute_run"
# kombu's Redis transport: a message of priority p goes to the list "<queue>\x06\x16<step>",
# where step is the largest of its priority steps not above p; step 0 is the bare queue name.
# The workers are configured with one step per priority (settings,
# CELERY_BROKER_TRANSPORT_OPTIONS), so every priority has a list of its own.
PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = BROKER_STEPS
# Messages per LPUSH: big enough to amortise the round trip, small enough not to stall Redis.
_PUSH_CHUNK = 1000
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


@dataclass(frozen=True)
class QueuedRun:
    """A run the database holds as queued at ``attempt``: what a message must carry."""

    run_id: uuid.UUID
    attempt: int
    partition: int
    queue: str
    priority: int
    # The attempt's due instant, when known (claims, timers): its publish lag is measured from it.
    due_at: datetime | None = None
    # The run's tenant, when known (claims): held-back runs go out in fair rounds by tenant
    # (beat_engine/backpressure.py); 0 groups the runs of timers and the sweep.
    tenant: int = 0


def queue_key(queue: str, priority: int) -> str:
    step = max(s for s in PRIORITY_STEPS if s <= max(HIGHEST, min(LOWEST, priority)))
    return f"{queue}{PRIORITY_SEP}{step}" if step else queue


def _envelope(task_id: str, body: str, argsrepr: str, origin: str, run: QueuedRun,
              epoch: object) -> dict[str, object]:  # fmt: skip
    """The JSON envelope kombu's Redis transport stores, holding a Celery protocol-2 task.

    Messages carry ids only: the worker loads everything else from the database (Redis is a
    hint, docs/architecture.md, Invariants).
    """
    return {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": EXECUTE_TASK,
            "id": task_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": task_id,
            "parent_id": None,
            "argsrepr": argsrepr,
            "kwargsrepr": "{}",
            "origin": origin,
            "ignore_result": True,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
            # Which partition lease (fencing epoch) the sender held when it pushed: lets
            # operators and the fault tests tell a zombie's message from an owner's.
            "sched_partition": run.partition,
            "sched_epoch": epoch,
        },
        "properties": {
            "correlation_id": task_id,
            "reply_to": "",
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": run.queue},
            "priority": run.priority,
            "body_encoding": "base64",
            # Unique per message, as kombu's uuid4 tag is: the task id is exactly that.
            "delivery_tag": task_id,
        },
    }


_BODY = json.dumps([["@RUN@", 1], {}, _EMBED], separators=(",", ":")).replace("1]", "@ATT@]", 1)


class MessageTemplate:
    """build_message's JSON, rendered by string formatting: one json.dumps per publisher, not
    per message (json.dumps of the nested envelope was most of the publish CPU, profiled)."""

    def __init__(self, origin: str) -> None:
        marker = QueuedRun(uuid.UUID(int=0), 0, 0, "@QUEUE@", 0)
        raw = json.dumps(
            _envelope("@TASK@", "@BODY@", "@ARGS@", origin, marker, "@EPOCH@"),
            separators=(",", ":"),
        )
        raw = raw.replace("%", "%%").replace('"sched_partition":0', '"sched_partition":%(part)d')
        raw = raw.replace('"priority":0', '"priority":%(prio)d')
        for marker_text, name in (("@TASK@", "task"), ("@BODY@", "body"), ("@ARGS@", "args"),
                                  ("@QUEUE@", "queue")):  # fmt: skip
            raw = raw.replace(marker_text, f"%({name})s")
        self._text = raw.replace('"%(epoch)s"', "%(epoch)d").replace('"@EPOCH@"', "%(epoch)d")
        self._body = _BODY.replace("%", "%%").replace("@RUN@", "%s").replace("@ATT@", "%d")

    def render(self, run: QueuedRun, *, task_id: str, epoch: int) -> str:
        run_id = str(run.run_id)
        body = base64.b64encode((self._body % (run_id, run.attempt)).encode()).decode("ascii")
        return self._text % {
            "task": task_id, "body": body, "args": f"['{run_id}', {run.attempt}]",
            "queue": json.dumps(run.queue)[1:-1], "part": run.partition, "prio": run.priority,
            "epoch": epoch,
        }  # fmt: skip


def task_ids(count: int) -> list[str]:
    """Random (version 4) ids from one read of the OS's randomness, not one read per id."""
    raw = os.urandom(16 * count)
    return [str(uuid.UUID(bytes=raw[i : i + 16], version=4)) for i in range(0, 16 * count, 16)]


def build_message(run: QueuedRun, *, origin: str, epoch: int = 0) -> str:
    return MessageTemplate(origin).render(run, task_id=task_ids(1)[0], epoch=epoch)


# The first attempt's publish lag (lateness) is written by the mark of its push, whatever the
# run did meanwhile: while a spike drains the mark is deferred, and a worker has often started
# (or finished) the run by then. A started run's due instant is read back from its start lag
# (started_at - start_lag), because its due_at may have moved on to a retry. published_at, the
# sweep's hint, is only for runs still queued.
MARK_PUBLISHED_SQL = f"""
UPDATE jobs_jobrun
   SET published_at = CASE WHEN state = '{RunState.QUEUED.value}' THEN %(at)s
                           ELSE published_at END,
       lateness = CASE WHEN lateness IS NOT NULL OR attempt <> 1 THEN lateness
                       WHEN state = '{RunState.QUEUED.value}' THEN %(at)s - due_at
                       ELSE %(at)s - (started_at - start_lag) END
 WHERE id = ANY(%(ids)s::uuid[])
   AND (state = '{RunState.QUEUED.value}' OR (attempt = 1 AND lateness IS NULL))
"""

# A run found still waiting in the broker gets a new stamp for the sweep, not a lateness: its
# message went out earlier, when it was pushed.
RESTAMP_SQL = f"""
UPDATE jobs_jobrun SET published_at = %(at)s
 WHERE id = ANY(%(ids)s::uuid[]) AND state = '{RunState.QUEUED.value}'
"""


@dataclass(frozen=True)
class Pushed:
    """Runs whose messages went out at ``published_at``, not yet marked published."""

    published_at: datetime
    run_ids: tuple[uuid.UUID, ...]


def mark_published(batches: Sequence[Pushed], *, restamp: bool = False) -> None:
    """Mark pushed runs published, with the instant each was pushed, in one transaction
    (``restamp``: runs found still waiting, stamped again for the sweep only).

    The mark is a hint for the sweep, not a promise: if a crash loses it, the sweep publishes
    the run again and the worker's compare-and-set drops the duplicate. So it need not wait
    for its WAL flush. Claims keep synchronous_commit on: a claim lost after its messages
    went out would let the firing be claimed twice.
    """
    if not batches:
        return
    with transaction.atomic(), server_cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
        sql = RESTAMP_SQL if restamp else MARK_PUBLISHED_SQL
        for batch in batches:
            cursor.execute(sql, {"at": batch.published_at, "ids": uuid_array(batch.run_ids)})


# A message rendered ahead of its push: run id -> (broker list, message, epoch it carries).
Rendered = dict[uuid.UUID, tuple[str, str, int]]


class Publisher:
    def __init__(
        self, client: redis.Redis[bytes], *, origin: str, staging_ttl_s: float = 120.0
    ) -> None:
        self._template = MessageTemplate(origin)
        self.ledger = BrokerLedger(client)
        self._stager = Stager(client, origin=origin, ttl_s=staging_ttl_s)
        self._client = client
        # Broker lists this publisher pushed to: the queues whose depth it samples. Pushes run
        # on the preparing thread too, so the set is read and grown under a lock.
        self._lists: set[str] = set()
        self._lists_lock = threading.Lock()

    def render(self, runs: Sequence[QueuedRun], epochs: Mapping[int, int]) -> Rendered:
        """Each run's message and broker list. Pure string work, safe on any thread: the
        engine renders a batch on its preparing thread before the batch's claim commits."""
        render = self._template.render
        rendered: Rendered = {}
        for run, task_id in zip(runs, task_ids(len(runs)), strict=True):
            epoch = epochs.get(run.partition, 0)
            rendered[run.run_id] = (
                queue_key(run.queue, run.priority),
                render(run, task_id=task_id, epoch=epoch),
                epoch,
            )
        return rendered

    def stage(
        self, runs: Sequence[QueuedRun], rendered: Rendered, *, min_runs: int
    ) -> dict[uuid.UUID, StagedGroup]:
        """Stage the messages of runs armed for one instant and one broker list, at least
        ``min_runs`` of them (beat_engine/broker_staging.py); returns each staged run's group.
        A group left out is pushed at its instant as any run."""
        by_group: dict[tuple[datetime | None, str], list[tuple[QueuedRun, str, int]]]
        by_group = defaultdict(list)
        for run in runs:
            message = rendered.get(run.run_id)
            if message is not None:
                key, text, epoch = message
                by_group[(run.due_at, key)].append((run, text, epoch))
        groups = [(key, members) for (_due, key), members in by_group.items()
                  if len(members) >= min_runs]  # fmt: skip
        if not groups:
            return {}
        staged = self._stager.stage(groups, _PUSH_CHUNK)
        return {run.run_id: group for group in staged for run in group.runs}

    def discard(self, staged: Sequence[StagedGroup]) -> None:
        self._client.delete(*(group.key for group in staged))

    def push(
        self,
        runs: Sequence[QueuedRun],
        epochs: Mapping[int, int],
        rendered: Rendered | None = None,
        staged: Sequence[StagedGroup] = (),
    ) -> dict[str, int]:
        """LPUSH every message, one MULTI round trip for the lot (no per-message path), and
        count them per list (beat_engine/broker_ledger.py); returns each list's count.

        Messages rendered ahead are used when they carry the epoch held now; the rest are
        rendered here. A staged group is moved instead when all its runs are pushed here and
        its messages carry the epochs held now; otherwise its staging list is deleted and its
        runs pushed as the rest (beat_engine/broker_staging.py)."""
        moves, discard, direct = _movable(runs, epochs, staged)
        positions, moved = self._push_direct(direct, epochs, rendered, moves, discard)
        # A staging list that lost messages moved the first ones staged: the rest go as any.
        left = [run for group, went in zip(moves, moved, strict=True)
                for run in group.runs[went:]]  # fmt: skip
        if left:
            logger.warning("beat.staged_lost", extra={"runs": len(left)})
            again, _ = self._push_direct(left, epochs, rendered, (), ())
            for key, position in again.items():
                positions[key] = max(positions.get(key, 0), position)
        return positions

    def _push_direct(
        self,
        runs: Sequence[QueuedRun],
        epochs: Mapping[int, int],
        rendered: Rendered | None,
        moves: Sequence[StagedGroup],
        discard: Sequence[StagedGroup],
    ) -> tuple[dict[str, int], list[int]]:
        ready = rendered or {}
        # One look-up per run: for a spike pushed without staging, most of the Python work.
        messages: list[tuple[str, str, int] | None] = [ready.get(r.run_id) for r in runs]
        stale = [
            r for r, m in zip(runs, messages, strict=True)
            if m is None or m[2] != epochs.get(r.partition, 0)
        ]  # fmt: skip
        if stale:
            again = self.render(stale, epochs)
            messages = [again.get(r.run_id, m) for r, m in zip(runs, messages, strict=True)]
        by_key: dict[str, list[str]] = defaultdict(list)
        for message in messages:
            assert message is not None
            by_key[message[0]].append(message[1])
        lists = by_key.keys() | {group.list_key for group in moves}
        if not lists <= self._lists:
            with self._lists_lock:
                self._lists.update(lists)
        return self.ledger.push(
            by_key,
            _PUSH_CHUNK,
            moves=[(group.key, group.list_key, len(group.runs)) for group in moves],
            discard=[group.key for group in discard],
        )

    def queue_depths(self, queues: Sequence[str]) -> dict[str, int]:
        """Messages waiting in each of ``queues``: its priority lists' lengths summed, in one
        round trip (the backpressure's reading, beat_engine/backpressure.py)."""
        keys = sorted({(queue, queue_key(queue, step)) for queue in queues
                       for step in PRIORITY_STEPS})  # fmt: skip
        pipe = self._client.pipeline(transaction=False)
        for _queue, key in keys:
            pipe.llen(key)
        depth = dict.fromkeys(queues, 0)
        for (queue, _key), length in zip(keys, pipe.execute(), strict=True):
            depth[queue] += int(length)
        return depth

    def sample_queue_depth(self) -> None:
        """Set the queue depth gauge of every queue pushed to: its lists' lengths, summed over
        priority steps, in one round trip."""
        with self._lists_lock:
            lists = sorted(self._lists)
        if not lists:
            return
        pipe = self._client.pipeline(transaction=False)
        for key in lists:
            pipe.llen(key)
        depth: dict[str, int] = defaultdict(int)
        for key, length in zip(lists, pipe.execute(), strict=True):
            depth[key.partition(PRIORITY_SEP)[0]] += int(length)
        for queue, waiting in depth.items():
            metrics.QUEUE_DEPTH.labels(queue=queue).set(waiting)

    def publish(
        self,
        runs: Sequence[QueuedRun],
        *,
        epochs: Mapping[int, int],
        now: Callable[[], datetime],
        rendered: Rendered | None = None,
        staged: Sequence[StagedGroup] = (),
    ) -> Pushed:
        """Push; the caller marks the result published (outbox), now or a little later with
        mark_published: a crash before the mark leaves the runs for the sweep to publish
        again, and the worker's compare-and-set drops the duplicate."""
        if not runs:
            return Pushed(now(), ())
        positions = self.push(runs, epochs, rendered, staged)
        pushed = Pushed(self.ledger.instant(now()), tuple(r.run_id for r in runs))
        metrics.observe_publish_lag(runs, pushed.published_at)
        try:
            self.ledger.record(positions, pushed.published_at)
        except redis.RedisError:
            # Pushed but not recorded: the sweep cannot tell these messages still wait, and
            # sends them again republish_after later (one duplicate, which the start drops).
            logger.warning("beat.ledger_failed", extra={"runs": len(runs)}, exc_info=True)
        return pushed


def _movable(
    runs: Sequence[QueuedRun], epochs: Mapping[int, int], staged: Sequence[StagedGroup]
) -> tuple[list[StagedGroup], list[StagedGroup], list[QueuedRun]]:
    """The staged groups to move (every run of theirs among ``runs``, their messages of the
    epochs held now), the others, whose staging lists are deleted, and the runs to push."""
    moves = [group for group in staged if group.carries_current(epochs)]
    discard = [group for group in staged if not group.carries_current(epochs)]
    if not moves:
        return [], discard, list(runs)
    # By identity: the runs armed are the very objects staged (beat_engine/broker_staging.py).
    moving = {id(run) for group in moves for run in group.runs}
    direct = [run for run in runs if id(run) not in moving]
    if len(runs) - len(direct) == len(moving):
        return moves, discard, direct
    # Some run of a group is not pushed here (fenced out, held back at its queue's bound, or
    # its partition dropped): the group's list is deleted, its other runs pushed as any.
    ids = {id(run) for run in runs}
    whole = [group for group in moves if all(id(run) in ids for run in group.runs)]
    broken = [group for group in moves if group not in whole]
    kept, _none, direct = _movable(runs, epochs, whole)
    return kept, discard + broken, direct
