"""Which runs' messages still wait in the broker, told without reading the messages.

kombu's Redis transport keeps a queue as a list that messages enter at the head (LPUSH, ours)
and leave at the tail (BRPOP, a worker's). Beside every list the engine keeps two keys:

* ``sched:broker:pushed:<list>`` counts the messages the engine ever pushed to it; the count
  is raised in the same MULTI as the LPUSH, so a message's position in that count follows its
  place in the list. ``count - LLEN`` messages have left the list, and they are the oldest.
* ``sched:broker:batches:<list>`` is a sorted set: for each push batch (and each re-check,
  below) its member is the instant the runs' ``published_at`` holds (microseconds since the
  epoch) and its score is the count after its last message. A batch whose score exceeds
  ``count - LLEN`` still has messages in the list.

A run the sweep finds unstarted long after its ``published_at`` is therefore still waiting
when its batch is there and above the consumed count; it is then not sent again, only
re-stamped (a new member for the new ``published_at``, scored with the old batch's score), so
a backlog or a worker outage costs one message per run, never one per sweep period (bounded
redelivery, docs/architecture.md, Invariants). A batch entry gone (Redis lost its keys: a
flush, a restart without persistence) or consumed (a worker took the message and never
started the run) means the message is lost, and the run is sent again: Redis is a hint
(docs/architecture.md, Invariants), and these keys are lost exactly when the messages are.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# Drops every batch wholly consumed, then records a batch at ``position`` under ``member``
# (keeping the higher score if the member is already there) unless it is consumed already;
# returns whether it did. A batch scored above the count means the count was lost while the
# set survived (eviction of one key): the set no longer tells anything, so it is dropped and
# its runs are sent again. KEYS: count, batches, list. ARGV: member, position.
_RECORD_LUA = """
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local consumed = count - redis.call('LLEN', KEYS[3])
local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
if top[2] and tonumber(top[2]) > count then redis.call('DEL', KEYS[2]) end
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', consumed)
local position = tonumber(ARGV[2])
if position > count or position <= consumed then return 0 end
local held = redis.call('ZSCORE', KEYS[2], ARGV[1])
if (not held) or tonumber(held) < position then
  redis.call('ZADD', KEYS[2], position, ARGV[1])
end
return 1
"""

_RECORD_SHA = hashlib.sha1(_RECORD_LUA.encode()).hexdigest()

# Moves up to ARGV[1] messages of a staging list (beat_engine/broker_staging.py) from its tail
# (the first staged) to the broker list's head, where an LPUSH puts them, deletes the staging
# list and raises the pushed count by as many as moved. KEYS: staging list, broker list,
# pushed count. Returns {moved, count}.
MOVE_LUA = """
local want = tonumber(ARGV[1])
local moved = 0
while moved < want do
  if not redis.call('RPOPLPUSH', KEYS[1], KEYS[2]) then break end
  moved = moved + 1
end
redis.call('DEL', KEYS[1])
return {moved, redis.call('INCRBY', KEYS[3], moved)}
"""


def count_key(list_key: str) -> str:
    return f"sched:broker:pushed:{list_key}"


def batches_key(list_key: str) -> str:
    return f"sched:broker:batches:{list_key}"


def member(at: datetime) -> str:
    """``published_at`` as the batch's member: whole microseconds, as PostgreSQL stores it."""
    return str((at - _EPOCH) // _MICROSECOND)


@dataclass(frozen=True)
class Sent:
    """A queued run as the sweep found it: its id, broker list and ``published_at``."""

    run_id: uuid.UUID
    list_key: str
    published_at: datetime


class BrokerLedger:
    def __init__(self, client: redis.Redis[bytes]) -> None:
        self._client = client
        self._record = client.register_script(_RECORD_LUA)
        # Every batch and re-check gets an instant of its own (two batches sharing a member
        # would share the later one's score); pushes come from two threads.
        self._last_instant = _EPOCH
        self._instant_lock = threading.Lock()

    def instant(self, now: datetime) -> datetime:
        """``now``, or a microsecond past the last instant handed out if that is later."""
        with self._instant_lock:
            self._last_instant = max(now, self._last_instant + _MICROSECOND)
            return self._last_instant

    def push(
        self,
        messages: Mapping[str, Sequence[str]],
        chunk: int,
        *,
        moves: Sequence[tuple[str, str, int]] = (),
        discard: Sequence[str] = (),
    ) -> tuple[dict[str, int], list[int]]:
        """LPUSH each list's messages and raise its count, move each (staging list, broker
        list, messages staged) onto its broker list (the script raises the count by as many as
        it moved) and delete the staging lists ``discard`` names, in one MULTI. Returns each
        list's count after its last message (the position a batch entry is recorded at) and
        how many each move moved."""
        pipe = self._client.pipeline(transaction=True)
        count_at: dict[str, int] = {}
        for key, batch in messages.items():
            for start in range(0, len(batch), chunk):
                pipe.lpush(key, *batch[start : start + chunk])
            count_at[key] = len(pipe)
            pipe.incrby(count_key(key), len(batch))
        move_at: list[int] = []
        for staging, list_key, staged in moves:
            move_at.append(len(pipe))
            pipe.eval(MOVE_LUA, 3, staging, list_key, count_key(list_key), staged)
        for key in discard:
            pipe.delete(key)
        results = pipe.execute()
        positions = {key: int(results[i]) for key, i in count_at.items()}
        moved: list[int] = []
        for (_staging, list_key, _staged), i in zip(moves, move_at, strict=True):
            went, after = (int(n) for n in results[i])
            moved.append(went)
            # Moves come after every LPUSH in the MULTI: their count is the list's last.
            positions[list_key] = max(positions.get(list_key, 0), after)
        return positions, moved

    def record(self, positions: Mapping[str, int], at: datetime) -> None:
        """Record each list's batch under the instant its runs are marked published."""
        if not positions:
            return
        self._run_records([(key, member(at), position) for key, position in positions.items()])

    def _run_records(self, records: Sequence[tuple[str, str, int]]) -> list[int]:
        """Run the record script for each (list, member, position), in one round trip.

        EVALSHA without redis-py's SCRIPT EXISTS check, a round trip more on every push.
        Recording is idempotent: after a Redis restart emptied the script cache, each record
        runs again through the script object, which loads it."""
        pipe = self._client.pipeline(transaction=False)
        for key, name, position in records:
            pipe.evalsha(_RECORD_SHA, 3, count_key(key), batches_key(key), key, name, position)
        try:
            return [int(kept) for kept in pipe.execute()]
        except redis.exceptions.NoScriptError:
            return [
                int(self._record(keys=[count_key(key), batches_key(key), key], args=[name, pos]))
                for key, name, pos in records
            ]

    def waiting(
        self, runs: Sequence[Sent], *, restamp_at: datetime
    ) -> dict[datetime, set[uuid.UUID]]:
        """Of ``runs``, those whose message still waits in its list, grouped by the instant
        each group is re-stamped at (from ``restamp_at`` on, one per batch, so each group keeps
        its own batch's position). The caller marks each group published at its instant;
        runs left out have lost their message and are to be sent again."""
        by_list: dict[str, list[Sent]] = defaultdict(list)
        for run in runs:
            by_list[run.list_key].append(run)
        read = self._client.pipeline(transaction=True)
        members: dict[str, list[str]] = {}
        for key, sent in by_list.items():
            members[key] = sorted({member(s.published_at) for s in sent})
            read.get(count_key(key)).llen(key)
            for m in members[key]:
                read.zscore(batches_key(key), m)
        replies = iter(read.execute())
        groups: dict[tuple[str, float], set[uuid.UUID]] = defaultdict(set)
        for key, sent in by_list.items():
            consumed = int(next(replies) or 0) - int(next(replies))
            position = {m: next(replies) for m in members[key]}
            for s in sent:
                score = position[member(s.published_at)]
                if score is not None and score > consumed:
                    groups[(key, score)].add(s.run_id)
        return self._restamp(groups, restamp_at)

    def _restamp(
        self, groups: Mapping[tuple[str, float], set[uuid.UUID]], at: datetime
    ) -> dict[datetime, set[uuid.UUID]]:
        stamped: dict[datetime, set[uuid.UUID]] = {}
        if not groups:
            return stamped
        order = [(group, self.instant(at)) for group in sorted(groups)]
        kept_all = self._run_records(
            [(key, member(instant), int(score)) for (key, score), instant in order]
        )
        # A group recorded as consumed (0) lost its message meanwhile: it is sent again.
        for (group, instant), kept in zip(order, kept_all, strict=True):
            if kept:
                stamped[instant] = set(groups[group])
        return stamped
