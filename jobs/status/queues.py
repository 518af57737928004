"""Broker queue depth: messages waiting in each Celery queue's Redis lists.

kombu's Redis transport keeps a queue as one list per priority step (``<queue>`` and
``<queue>\\x06\\x16<step>``). The lists in use are the ones the engine ever pushed to, which
its broker ledger names (``sched:broker:pushed:<list>``, beat_engine/broker_ledger.py), plus
the default and dead-letter queues, which others push to. The ledger keys are found with
SCAN (a bounded number of keys, never KEYS), and every list's LLEN is read in one pipeline.
"""

from __future__ import annotations

from collections import defaultdict

import redis
from kombu.transport.redis import Channel

from beat_engine.broker_ledger import count_key
from beat_engine.priority_order import BROKER_STEPS

# At most this many lists are looked at; a deployment has a handful of queues.
MAX_LISTS = 200
PRIORITY_SEPARATOR: str = Channel.sep
# One list per priority (settings: CELERY_BROKER_TRANSPORT_OPTIONS["priority_steps"]).
PRIORITY_STEPS: tuple[int, ...] = BROKER_STEPS


def list_keys(client: redis.Redis[bytes], *, named: list[str]) -> list[str]:
    """Every broker list to measure: each priority list of ``named`` and of ledgered lists."""
    prefix = count_key("")
    keys = {
        queue if step == 0 else f"{queue}{PRIORITY_SEPARATOR}{step}"
        for queue in named
        for step in PRIORITY_STEPS
    }
    for raw in client.scan_iter(match=count_key("*"), count=1000):
        keys.add(bytes(raw).decode()[len(prefix) :])
        if len(keys) >= MAX_LISTS:
            break
    return sorted(keys)


def queue_depths(client: redis.Redis[bytes], *, named: list[str]) -> dict[str, int]:
    """Waiting messages per queue, priority lists summed; reserved ones are not counted."""
    keys = list_keys(client, named=named)
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.llen(key)
    depths: dict[str, int] = defaultdict(int)
    for key, length in zip(keys, pipe.execute(), strict=True):
        depths[key.split(PRIORITY_SEPARATOR, 1)[0]] += int(length)
    return dict(sorted(depths.items()))
