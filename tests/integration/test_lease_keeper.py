"""The lease keeper's step on a FakeClock, against real Redis and PostgreSQL.

It renews when a renewal is due and the engine's loop is alive, lets the leases lapse when
the loop stalled, and never brings back a lease the engine dropped while it was renewing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis

from beat_engine.lease_keeper import LeaseKeeper
from beat_engine.metrics import LEASE_RENEWAL_GAP
from beat_engine.ownership import Ownership
from tests.support.beat_nodes import make_engine
from tests.support.clock import FakeClock
from tests.support.factories import T0

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _owning_all(clock: FakeClock) -> Ownership:
    engine = make_engine(clock, node_id="node-a")
    own = engine.ownership
    own.maintain(clock.monotonic())
    assert len(own.leases) == engine.config.partitions
    return own


def test_a_due_renewal_is_made_by_the_keeper_while_the_loop_is_busy(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock(T0)
    own = _owning_all(clock)
    keeper = LeaseKeeper(own, clock, stall_s=30)
    assert keeper.step() > 0  # just renewed by the engine: nothing to do yet
    first = {p: lease.expires_at_mono for p, lease in own.leases.items()}

    gaps = LEASE_RENEWAL_GAP._sum.get()
    clock.advance(timedelta(seconds=own.config.lease_renew_s))
    keeper.step()

    # The renewal gap is observed: one renewal period since the engine's renewal.
    assert LEASE_RENEWAL_GAP._sum.get() - gaps == pytest.approx(own.config.lease_renew_s)
    expected = clock.monotonic() + own.config.lease_ttl_s
    assert {lease.expires_at_mono for lease in own.leases.values()} == {expected}
    assert all(expected > first[p] for p in own.leases)
    assert own.renewed_mono == clock.monotonic()


def test_a_stalled_loop_gets_no_renewal(redis_client: redis.Redis) -> None:
    clock = FakeClock(T0)
    own = _owning_all(clock)
    keeper = LeaseKeeper(own, clock, stall_s=5)
    before = dict(own.leases)

    clock.advance(timedelta(seconds=6))  # the engine's loop did not come round for 6 s
    keeper.step()

    assert own.leases == before
    own.maintain(clock.monotonic())  # the loop is back: the keeper renews again
    renewed_by_engine = own.renewed_mono
    clock.advance(timedelta(seconds=own.config.lease_renew_s))
    keeper.step()
    assert own.renewed_mono > renewed_by_engine


class _DropsDuringExtend:
    """A store whose extend lets the engine drop a partition while the keeper waits on Redis."""

    def __init__(self, inner: Any, own: Ownership, partition: int) -> None:
        self._inner, self._own, self._partition = inner, own, partition

    def extend(self, partitions: list[int], node: str, ttl_ms: int) -> list[int]:
        extended: list[int] = self._inner.extend(partitions, node, ttl_ms)
        self._own.drop([self._partition], reason="rebalance")
        return extended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_lease_dropped_during_the_keepers_renewal_stays_dropped(
    redis_client: redis.Redis,
) -> None:
    clock = FakeClock(T0)
    own = _owning_all(clock)
    own.store = _DropsDuringExtend(own.store, own, partition=5)
    keeper = LeaseKeeper(own, clock, stall_s=30)

    clock.advance(timedelta(seconds=own.config.lease_renew_s))
    keeper.step()

    assert 5 not in own.leases
    assert len(own.leases) == own.config.partitions - 1
