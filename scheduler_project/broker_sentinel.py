"""kombu's ``sentinel://`` transport, with a failover's connection loss kept a connection error.

When the worker's consumer loses the master while it waits in BRPOP and holds unacked messages,
Celery first collects the broken connection (kombu detaches the transport from its Connection:
``transport.client = None``) and then closes it. That close is the channel's first chance to
restore its unacked messages, and the installed kombu (5.7.0) then builds a new connection pool
from ``self.connection.client``, which is None: ``AttributeError: 'NoneType' object has no
attribute 'hostname'`` escapes Celery's error handling and stops the worker ("Unrecoverable
error"). Under Sentinel that happens in a failover under load (bench/bench_redis_failover.py hit
it), the very moment a worker must reconnect.

Here that case raises ``redis.ConnectionError`` instead, which kombu and Celery treat as the
broker being unreachable: the close is finished, the consumer reconnects through the sentinels
to the promoted replica and the worker goes on. The messages left in the unacked index are
those of attempts this worker was running: they finish and record their outcome once (their
lease lives in PostgreSQL), and a copy restored later finds its run no longer queued at that
attempt, so the start compare-and-set drops it. A message the old master never replicated is
re-sent by the engine's sweep (Redis is a hint, docs/architecture.md, Invariants).

kombu resolves the transport from the URL's scheme again at each failover switch between the
``;``-separated sentinels, so the scheme's alias is what points here (``install()``).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import redis as kombu_redis

from scheduler_project.broker_priority import DrainBoundMixin, ReservedShareMixin

ALIAS = "sentinel"
logger = logging.getLogger(__name__)


class SentinelChannel(ReservedShareMixin, kombu_redis.SentinelChannel):
    from_transport_options = (
        *kombu_redis.SentinelChannel.from_transport_options,
        "low_priority_share",
    )

    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:
            # Logged: Celery ignores the error, and the unacked messages stay where they are.
            logger.warning("broker.sentinel.restore_after_collect", extra={"reason": "collected"})
            raise redis.ConnectionError("the broker connection was already collected")
        params: dict[str, Any] = super()._connparams(asynchronous)  # type: ignore[misc]
        return params


class SentinelTransport(DrainBoundMixin, kombu_redis.SentinelTransport):  # type: ignore[misc]
    Channel = SentinelChannel


def install() -> None:
    TRANSPORT_ALIASES[ALIAS] = f"{__name__}:SentinelTransport"
