"""The worker's transports take the reserved share: redis://, rediss:// and sentinel:// alike."""

from __future__ import annotations

from kombu.transport import resolve_transport

from scheduler_project import broker_priority
from scheduler_project.broker_sentinel import SentinelChannel
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
