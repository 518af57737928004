"""Retry backoff: capped exponential delays with full jitter."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beat_engine.backoff import RetryPolicy, has_attempts_left, retry_delay

SECOND = timedelta(seconds=1)
STEADY = RetryPolicy(max_attempts=5, base_delay=SECOND, max_delay=60 * SECOND, jitter=False)


@pytest.mark.parametrize(
    ("attempt", "delay"),
    [(1, 1), (2, 2), (3, 4), (6, 32), (7, 60), (8, 60), (1000, 60), (10**9, 60)],
)
def test_delay_doubles_up_to_max_delay_without_jitter(attempt: int, delay: int) -> None:
    assert retry_delay(attempt, STEADY, random.Random(0)) == delay * SECOND


def test_jittered_delay_is_reproducible_from_the_injected_generator() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=SECOND, max_delay=60 * SECOND)
    first = [retry_delay(4, policy, random.Random(7)) for _ in range(3)]
    assert len(set(first)) == 1
    assert SECOND <= first[0] <= 8 * SECOND


def test_jittered_delay_never_drops_below_a_short_floor() -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=10 * SECOND, max_delay=60 * SECOND)
    rng = random.Random(1)
    delays = [retry_delay(1, policy, rng) for _ in range(500)]
    assert min(delays) >= SECOND  # floor = min(base_delay, 1 s)
    assert max(delays) <= 10 * SECOND


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (RetryPolicy(0, SECOND, SECOND), "max_attempts must be between 1 and 100"),
        (RetryPolicy(101, SECOND, SECOND), "max_attempts must be between 1 and 100"),
        (RetryPolicy(3, timedelta(0), SECOND), "base_delay must be positive"),
        (RetryPolicy(3, 2 * SECOND, SECOND), "must not be shorter than base_delay"),
        (RetryPolicy(3, SECOND, timedelta(days=8)), "at most 7 days"),
    ],
)
def test_invalid_policy_is_rejected_with_the_reason(policy: RetryPolicy, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy.validate()


def test_attempt_numbers_are_one_based() -> None:
    with pytest.raises(ValueError, match="1-based"):
        retry_delay(0, STEADY, random.Random(0))


@pytest.mark.parametrize(("attempt", "left"), [(1, True), (4, True), (5, False), (6, False)])
def test_has_attempts_left_until_max_attempts(attempt: int, left: bool) -> None:
    assert has_attempts_left(attempt, STEADY) is left


@given(
    attempt=st.integers(min_value=1, max_value=10_000),
    base=st.timedeltas(min_value=timedelta(microseconds=1), max_value=timedelta(hours=1)),
    extra=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=6)),
    jitter=st.booleans(),
    seed=st.integers(min_value=0, max_value=2**32),
)
@settings(max_examples=200, deadline=None, database=None)
def test_retry_delay_never_exceeds_cap(
    attempt: int, base: timedelta, extra: timedelta, jitter: bool, seed: int
) -> None:
    policy = RetryPolicy(max_attempts=10, base_delay=base, max_delay=base + extra, jitter=jitter)
    delay = retry_delay(attempt, policy, random.Random(seed))
    micro = timedelta(microseconds=1)
    exponential = (base // micro) * 2 ** min(attempt - 1, 60)  # integers: no timedelta overflow
    cap = timedelta(microseconds=min(policy.max_delay // micro, exponential))
    assert min(base, SECOND) <= delay <= cap


@pytest.mark.parametrize(
    ("attempt", "not_before", "delay"),
    [
        (1, 30, 30),  # the server's wait is longer than the backoff: it wins
        (6, 10, 32),  # the backoff is already longer: the server's wait changes nothing
        (1, 600, 60),  # longer than max_delay: capped there
        (1, 0, 1),
    ],
)
def test_a_requested_wait_is_a_floor_capped_by_max_delay(
    attempt: int, not_before: int, delay: int
) -> None:
    got = retry_delay(attempt, STEADY, random.Random(0), not_before=not_before * SECOND)
    assert got == delay * SECOND


@given(
    seed=st.integers(min_value=0, max_value=2**32),
    wait=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)),
)
@settings(max_examples=200, deadline=None, database=None)
def test_a_jittered_delay_never_undercuts_a_requested_wait(seed: int, wait: timedelta) -> None:
    policy = RetryPolicy(max_attempts=5, base_delay=SECOND, max_delay=3600 * SECOND)
    delay = retry_delay(1, policy, random.Random(seed), not_before=wait)
    assert delay >= min(wait, policy.max_delay)
    assert delay <= policy.max_delay
