"""Taking epochs skips a partition whose row another transaction holds instead of waiting for
it (docs/engine.md, "A frozen node"): the holder may be a node frozen mid-claim, and waiting
would stall the taker's whole loop until PostgreSQL ends that session."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from beat_engine.fencing import epochs_take, fence
from jobs.models import PartitionEpoch
from tests.support.factories import T0
from tests.support.waiting import test_database_url

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def _hold_fence(partition: int, epoch: int) -> psycopg.Connection:
    """Another session in the middle of a claim: it fenced ``partition`` and has not committed."""
    other = psycopg.connect(test_database_url())
    other.execute(
        "SELECT partition FROM jobs_partitionepoch WHERE partition = %s AND epoch = %s FOR UPDATE",
        [partition, epoch],
    )
    return other


def test_a_partition_held_by_another_transaction_is_skipped_not_waited_for() -> None:
    first = epochs_take([1, 2, 3], node="old", now=T0)
    assert first == {1: 1, 2: 1, 3: 1}
    holder = _hold_fence(2, first[2])
    try:
        with connection.cursor() as cursor:
            # Were the take to wait on the held row, this turns the wait into a failure.
            cursor.execute("SET statement_timeout = 5000")
        taken = epochs_take([1, 2, 3, 4], node="new", now=T0)
        # 4 had no row yet: inserted; 2 is left for a later try.
        assert taken == {1: 2, 3: 2, 4: 1}
        assert PartitionEpoch.objects.get(partition=2).owner == "old"
    finally:
        holder.rollback()
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("SET statement_timeout = 0")
    # Once the holder is gone the partition is taken, with an epoch above the old owner's.
    assert epochs_take([2], node="new", now=T0) == {2: 2}
    assert fence({2: first[2]}, now=T0) == frozenset()


def test_epochs_only_grow_and_name_their_taker() -> None:
    assert epochs_take([5], node="a", now=T0) == {5: 1}
    assert epochs_take([5, 6], node="b", now=T0) == {5: 2, 6: 1}
    assert dict(PartitionEpoch.objects.values_list("partition", "owner")) == {5: "b", 6: "b"}
