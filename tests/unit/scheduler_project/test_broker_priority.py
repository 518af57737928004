"""The worker's transports take the reserved share: redis://, rediss:// and sentinel:// alike."""

from __future__ import annotations

import socket

import pytest
from kombu.transport import resolve_transport

from scheduler_project import broker_priority
from scheduler_project.broker_sentinel import SentinelChannel, SentinelTransport
from scheduler_project.celery import app


def test_the_celery_app_resolves_every_redis_scheme_to_the_reserved_share_transport() -> None:
    assert app is not None
    for scheme in ("redis", "rediss"):
        assert resolve_transport(scheme) is broker_priority.Transport
    assert issubclass(SentinelChannel, broker_priority.ReservedShareMixin)


def test_the_share_and_one_list_per_priority_are_transport_options() -> None:
    options = app.conf.broker_transport_options
    assert options["priority_steps"] == list(range(10))
    assert options["low_priority_share"] == 0.1
    for channel in (broker_priority.Channel, SentinelChannel):
        assert "low_priority_share" in channel.from_transport_options


class _Drains:
    """A transport's drain_events: ``empty`` polls that find nothing, then a delivery."""

    def __init__(self, empty: int | None) -> None:
        self.empty = empty
        self.timeouts: list[float | None] = []

    def drain_events(self, connection: object, timeout: float | None = None) -> None:
        self.timeouts.append(timeout)
        if self.empty is None or len(self.timeouts) <= self.empty:
            raise TimeoutError()


class _Bounded(broker_priority.DrainBoundMixin, _Drains):
    pass


def test_both_transports_bound_their_drain_events() -> None:
    for transport in (broker_priority.Transport, SentinelTransport):
        assert issubclass(transport, broker_priority.DrainBoundMixin)


def test_drain_events_waits_in_short_pieces_and_returns_at_the_delivery() -> None:
    transport = _Bounded(empty=5)

    transport.drain_events(None, timeout=None)

    assert len(transport.timeouts) == 6
    assert all(t is not None and t <= broker_priority.PAUSED_RECHECK_S for t in transport.timeouts)


def test_drain_events_still_times_out_at_its_timeout_and_never_without_one() -> None:
    bounded = _Bounded(empty=None)
    with pytest.raises(socket.timeout):
        bounded.drain_events(None, timeout=0.2)
    # More than one piece: 0.2 s of waits of at most PAUSED_RECHECK_S each.
    assert len(bounded.timeouts) >= 2
    assert max(t or 0.0 for t in bounded.timeouts) <= broker_priority.PAUSED_RECHECK_S
    patient = _Bounded(empty=50)
    patient.drain_events(None)
    assert len(patient.timeouts) == 51
