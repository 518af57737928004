"""The sentinel:// broker transport: a collected connection's late restore is a connection error.

The worker's consumer, losing the master in BRPOP with unacked messages, closes its channel
after kombu detached the transport; the stock transport then raised AttributeError and the
worker stopped (scheduler_project/broker_sentinel.py). Nothing here connects: the sentinels
named are never asked.
"""

from __future__ import annotations

import pytest
import redis
from kombu import Connection
from kombu.transport import resolve_transport

from scheduler_project.broker_sentinel import SentinelChannel, SentinelTransport
from scheduler_project.celery import app

URL = "sentinel://127.0.0.1:1/0;sentinel://127.0.0.1:2/0"


def test_the_celery_app_resolves_sentinel_urls_to_this_transport() -> None:
    assert app is not None
    assert resolve_transport("sentinel") is SentinelTransport
    conn = Connection(URL, transport_options={"master_name": "mymaster"})
    assert conn.transport_cls == "sentinel"
    assert conn.transport.Channel is SentinelChannel


def test_a_channel_of_a_collected_connection_raises_a_connection_error() -> None:
    conn = Connection(URL, transport_options={"master_name": "mymaster"})
    channel = SentinelChannel.__new__(SentinelChannel)
    channel.connection = conn.transport
    conn.transport.client = None  # what Connection.collect() leaves behind
    with pytest.raises(redis.ConnectionError):
        channel._connparams()
    assert isinstance(redis.ConnectionError(), conn.connection_errors)
