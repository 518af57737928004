"""Retry backoff: capped exponential delays with full jitter from an injected generator."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

_MICROSECOND = timedelta(microseconds=1)
_MAX_ATTEMPTS = 100
_LONGEST_DELAY = timedelta(days=7)
_JITTER_FLOOR = timedelta(seconds=1)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int
    base_delay: timedelta
    max_delay: timedelta
    jitter: bool = True

    def validate(self) -> None:
        if not 1 <= self.max_attempts <= _MAX_ATTEMPTS:
            raise ValueError(
                f"max_attempts must be between 1 and {_MAX_ATTEMPTS}, got {self.max_attempts}"
            )
        if self.base_delay <= timedelta(0):
            raise ValueError(f"base_delay must be positive, got {self.base_delay}")
        if self.max_delay < self.base_delay:
            raise ValueError(
                f"max_delay ({self.max_delay}) must not be shorter than base_delay "
                f"({self.base_delay})"
            )
        if self.max_delay > _LONGEST_DELAY:
            raise ValueError(f"max_delay must be at most 7 days, got {self.max_delay}")


def retry_delay(
    attempt: int,
    policy: RetryPolicy,
    rng: random.Random,
    *,
    not_before: timedelta | None = None,
) -> timedelta:
    """How long to wait after failed attempt `attempt` (1-based) before the next one.

    The cap doubles from base_delay per attempt up to max_delay. Without jitter the delay is the
    cap; with it the delay is uniform in [floor, cap] ("full jitter", which spreads a herd of
    failures best), where floor = min(base_delay, 1 s) so a retry never fires instantly.

    ``not_before`` is a wait the target itself asked for (an HTTP Retry-After): the delay is
    never shorter than it, up to max_delay, which bounds every wait the job owner configured.
    """
    backoff = _backoff(attempt, policy, rng)
    if not_before is None:
        return backoff
    return max(backoff, min(not_before, policy.max_delay))


def _backoff(attempt: int, policy: RetryPolicy, rng: random.Random) -> timedelta:
    policy.validate()
    if attempt < 1:
        raise ValueError(f"attempt is 1-based, got {attempt}")
    base, longest = policy.base_delay // _MICROSECOND, policy.max_delay // _MICROSECOND
    # Past 2**40 us (12 days) the cap is max_delay anyway; clamping keeps huge attempts cheap.
    cap = min(longest, base << min(attempt - 1, 40))
    if not policy.jitter:
        return timedelta(microseconds=cap)
    floor = min(base, _JITTER_FLOOR // _MICROSECOND)
    # Integer microseconds: no float rounding can push the delay past the cap.
    return timedelta(microseconds=rng.randint(floor, cap))


def has_attempts_left(attempt: int, policy: RetryPolicy) -> bool:
    """Whether failed attempt `attempt` (1-based) may be followed by another."""
    return attempt < policy.max_attempts
