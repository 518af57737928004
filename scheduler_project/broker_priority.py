"""kombu's Redis transport with a reserved share of each worker's pops for the lowest priority.

kombu keeps a queue as one list per priority step and its consumer issues one BRPOP over all
of them, highest priority (step 0) first: BRPOP serves the first non-empty list, so the order
is strict and a steady stream of urgent messages starves the rest for as long as it lasts.
This channel keeps that order, except that a fraction ``low_priority_share`` of the messages it
takes are taken lowest-priority list first (beat_engine/priority_order.py): BRPOP then serves
the lowest priority waiting. With late acks and a prefetch of one message per pool process
(settings: CELERY_TASK_ACKS_LATE, CELERY_WORKER_PREFETCH_MULTIPLIER) the order of the pops is
the order the runs start in, so this is where the share of starts is enforced
(docs/limits.md, "Priorities").

The share is a transport option (CELERY_BROKER_TRANSPORT_OPTIONS["low_priority_share"], from
SCHEDULER_LOW_PRIORITY_SHARE); a stock kombu channel ignores the option and stays strict.
"""

from __future__ import annotations

import time
from typing import Any

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import Empty
from kombu.utils.encoding import bytes_to_str
from kombu.utils.json import loads

from beat_engine.priority_order import DEFAULT_SHARE, ReservedShare, scan_order

# Every scheme kombu resolves to its Redis transport ("redis+socket://" is split into the
# transport "redis" and a socket path by kombu itself).
SCHEMES = ("redis", "rediss")


class ReservedShareMixin:
    """Overrides of kombu 5.7's Channel._brpop_start/_brpop_read/_get: the same commands, with
    the priority lists in beat_engine.priority_order.scan_order."""

    low_priority_share: float = float(DEFAULT_SHARE)
    _reserved: ReservedShare | None = None

    def _turns(self) -> ReservedShare:
        # Made on first use: kombu sets the transport options after the class attributes.
        if self._reserved is None:
            self._reserved = ReservedShare(self.low_priority_share)
        return self._reserved

    def _scan_steps(self) -> list[int]:
        steps: list[int] = list(self.priority_steps)  # type: ignore[attr-defined]
        return scan_order(steps, lowest_first=self._turns().lowest_first())

    def _brpop_start(self, timeout: float | None = None) -> None:
        chan: Any = self
        if timeout is None:
            timeout = chan.brpop_timeout
        queues = chan._queue_cycle.consume(len(chan.active_queues))
        if not queues:
            return
        keys = [chan._q_for_pri(queue, pri) for pri in self._scan_steps() for queue in queues]
        chan._in_poll = chan.client.connection
        chan._brpop_sent_at = time.monotonic()
        command_args = ["BRPOP", *keys, timeout or 0]
        if chan.global_keyprefix:
            command_args = chan.client._prefix_args(command_args)
        chan.client.connection.send_command(*command_args)

    def _brpop_read(self, **options: Any) -> bool:
        delivered: bool = super()._brpop_read(**options)  # type: ignore[misc]
        # Reached only when a message came back (an empty reply raises Empty): an idle wait
        # spends no turn.
        self._turns().taken()
        return delivered

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        chan: Any = self
        with chan.conn_or_acquire() as client:
            for pri in self._scan_steps():
                item = client.rpop(chan._q_for_pri(queue, pri))
                if item:
                    chan._maybe_update_queues_expire(client, queue)
                    self._turns().taken()
                    return loads(bytes_to_str(item))
            chan._maybe_update_queues_expire(client, queue)
            raise Empty()


class Channel(ReservedShareMixin, kombu_redis.Channel):
    from_transport_options = (*kombu_redis.Channel.from_transport_options, "low_priority_share")


# How long a worker without an event loop (the threads and gevent pools) waits at most between
# two looks at the broker while its prefetch is full.
PAUSED_RECHECK_S = 0.05


class DrainBoundMixin:
    """Workers with an event loop (prefork) never call ``drain_events``; Celery's loop for the
    threads and gevent pools calls it with a 2 s timeout. While the prefetch is full kombu sends
    no BRPOP and sleeps ``min(timeout, 1)`` seconds before it looks at the credit again
    (MultiChannelPoller.get), so once a whole prefetch of runs finished together the worker took
    no message for up to a second: a gevent worker at concurrency 100 ran 500 ms HTTP targets in
    waves, 39 runs/s where its concurrency allows 200 (docs/execution.md, "Worker pools").
    Here the wait is cut into pieces of at most ``PAUSED_RECHECK_S``, each of which looks at the
    credit again; the call as a whole keeps its meaning (it returns at the first delivery and
    raises socket.timeout once ``timeout`` has passed, never when it is None), and a BRPOP in
    flight stays where it is between the pieces."""

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = PAUSED_RECHECK_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError()
            try:
                super().drain_events(  # type: ignore[misc]
                    connection, timeout=min(left, PAUSED_RECHECK_S)
                )
            except TimeoutError:
                continue
            return


# The stubs give kombu's two Transport bases different drain_events signatures.
class Transport(DrainBoundMixin, kombu_redis.Transport):  # type: ignore[misc]
    Channel = Channel


def install() -> None:
    for scheme in SCHEMES:
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
