"""Lease arithmetic: deadlines start before the request, renewal precedes expiry."""

from __future__ import annotations

import pytest

from beat_engine.leases import (
    lease_from_grant,
    lease_renewed,
    lease_usable,
    next_renewal_mono,
    plan_leases,
)


def test_lease_deadlines_count_from_when_the_request_was_sent() -> None:
    lease = lease_from_grant(
        partition=3, node="a", epoch=7, sent_at_mono=100.0, ttl_s=10.0, renew_s=3.0
    )
    assert (lease.renew_at_mono, lease.expires_at_mono) == (103.0, 110.0)


@pytest.mark.parametrize(("now", "usable"), [(109.999, True), (110.0, False), (500.0, False)])
def test_lease_is_unusable_from_its_local_expiry(now: float, usable: bool) -> None:
    lease = lease_from_grant(
        partition=0, node="a", epoch=1, sent_at_mono=100.0, ttl_s=10.0, renew_s=3.0
    )
    assert lease_usable(lease, now) is usable


def test_renewal_keeps_the_epoch_and_moves_the_deadlines() -> None:
    lease = lease_from_grant(
        partition=0, node="a", epoch=4, sent_at_mono=100.0, ttl_s=10.0, renew_s=3.0
    )
    renewed = lease_renewed(lease, sent_at_mono=103.0, ttl_s=10.0, renew_s=3.0)
    assert (renewed.epoch, renewed.renew_at_mono, renewed.expires_at_mono) == (4, 106.0, 113.0)


def test_next_renewal_is_the_earliest_of_all_leases() -> None:
    leases = {
        p: lease_from_grant(partition=p, node="a", epoch=1, sent_at_mono=s, ttl_s=10.0, renew_s=3.0)
        for p, s in [(0, 100.0), (1, 98.0)]
    }
    assert next_renewal_mono(leases, default_mono=999.0) == 101.0
    assert next_renewal_mono({}, default_mono=999.0) == 999.0


def test_plan_takes_the_missing_and_releases_the_unwanted() -> None:
    plan = plan_leases(desired={1, 2, 3}, held={3, 4})
    assert (plan.acquire, plan.release) == (frozenset({1, 2}), frozenset({4}))
