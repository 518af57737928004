"""Staged messages: a spike's messages sent to Redis ahead of their instant, moved at it.

Claimed ahead, a spike's 50,000 runs still left their push at the instant: 48 MB of messages
for Redis to take in, about a second on the 2-core reference machine (docs/engine.md, "Claim
ahead"). Runs armed together for one instant and one broker list, at least
``stage_min_runs`` of them, have their messages pushed at their claim into a staging list
of their own, which no worker reads. At the instant one script per staging list moves them
onto the broker list, in the order they were staged, and raises the list's pushed count by as
many as it moved (``MOVE_LUA`` in beat_engine/broker_ledger.py), inside the MULTI of the push:
only the move is left at the instant, not the transfer.

Nothing staged is the record, and nothing staged is sent but by the move, which the push
makes after the same fence as every push (no stale fence, docs/architecture.md, Invariants),
and only for a group whose every run is being pushed and whose messages carry the epochs held
now. Otherwise the group's staging list is deleted and its runs pushed as any run. A node that
dies or loses the partition leaves its staging lists to expire (``ttl_s``): the runs are
queued in PostgreSQL, and the new owner arms and pushes them itself. A staging list that lost
messages (Redis restarted without them) moves fewer than its group holds: the first ones
staged, since a list keeps its order; the push sends the rest as any run.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import redis

if TYPE_CHECKING:
    from beat_engine.publisher import QueuedRun


@dataclass(eq=False)
class StagedGroup:
    """Runs whose messages wait in one staging list, in the order they were staged."""

    key: str
    list_key: str
    # The runs themselves, not their ids: the push tells them apart by identity (id()), an
    # integer's hash, where 50,000 UUID hashes cost tens of milliseconds at the instant.
    runs: tuple[QueuedRun, ...]
    # (partition, epoch) of every message in the list: moved only while all are held.
    epochs: frozenset[tuple[int, int]]

    def carries_current(self, epochs: Mapping[int, int]) -> bool:
        return all(epochs.get(partition) == epoch for partition, epoch in self.epochs)


class Stager:
    """Pushes groups of rendered messages into staging lists named for this process."""

    def __init__(self, client: redis.Redis[bytes], *, origin: str, ttl_s: float) -> None:
        self._client = client
        # Unique among the processes sharing the broker: a node restarted under the same name
        # must never add to a list its last life staged.
        self._prefix = f"sched:staged:{origin}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._seq = itertools.count()
        self._ttl_ms = max(1, int(ttl_s * 1000))

    def stage(
        self, groups: list[tuple[str, list[tuple[QueuedRun, str, int]]]], chunk: int
    ) -> list[StagedGroup]:
        """Stage each (broker list, [(run, message, epoch), ...]) in one MULTI; returns the
        groups staged. Raises redis.RedisError, and then nothing was staged."""
        if not groups:
            return []
        pipe = self._client.pipeline(transaction=True)
        staged: list[StagedGroup] = []
        for list_key, members in groups:
            key = f"{self._prefix}:{next(self._seq)}"
            messages = [message for _run, message, _epoch in members]
            for start in range(0, len(messages), chunk):
                pipe.lpush(key, *messages[start : start + chunk])
            pipe.pexpire(key, self._ttl_ms)
            staged.append(
                StagedGroup(
                    key,
                    list_key,
                    tuple(run for run, _message, _epoch in members),
                    frozenset((run.partition, epoch) for run, _message, epoch in members),
                )
            )
        pipe.execute()
        return staged
