"""The running limit's decision (pure): start, wait, and which older waiting runs to release."""

from __future__ import annotations

import pytest

from jobs.services.running_limits import Verdict, decide


@pytest.mark.parametrize(
    ("limit", "taken", "older", "verdict"),
    [
        # No limit: always starts, releases nothing.
        (None, 10_000, 5, Verdict(start=True)),
        # Below the limit with nobody older waiting: starts.
        (3, 2, 0, Verdict(start=True)),
        # At or over the limit (lowered meanwhile): waits, releases nothing.
        (3, 3, 0, Verdict(start=False)),
        (3, 5, 2, Verdict(start=False)),
        # A free slot but an older run waiting: the slot is the older run's.
        (3, 2, 1, Verdict(start=False, release=1)),
        # Two free, one older waiting: it is released and this run takes the other slot.
        (3, 1, 1, Verdict(start=True, release=1)),
        # Two free, three older waiting: the two oldest are released, this one waits.
        (3, 1, 3, Verdict(start=False, release=2)),
    ],
)
def test_decide(limit: int | None, taken: int, older: int, verdict: Verdict) -> None:
    assert decide(limit, taken=taken, older_waiting=older) == verdict
