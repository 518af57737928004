"""Priority order with a reserved share for the lowest waiting priority (pure, no I/O).

One scale everywhere: a job's ``priority`` is 0 (highest) to 9 (lowest), the direction of
kombu's Redis transport, whose consumer pops its priority lists in ascending order. Under
contention the highest waiting priority goes first, except on the reserved turns: a
fraction ``share`` of all picks goes to the lowest priority waiting, so that a steady stream
of urgent work never starves it. The turns are spread evenly (a Bresenham-style credit, exact
in fractions): over any k consecutive picks, floor(share * k) or ceil(share * k) are reserved
turns, whatever arrives in between. On a reserved turn with one priority waiting, that
priority is taken; the turn is not saved up for later.

Two places use it (docs/limits.md, "Priorities"): the engine's claim order when more firings
are due than one batch (order_by_priority), and the worker's consumption order from the
broker's priority lists (ReservedShare.lowest_first, scheduler_project/broker_priority.py),
which decides what starts next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from typing import TypeVar

HIGHEST = 0
LOWEST = 9
DEFAULT = 5
# One broker list per priority (kombu's default steps 0/3/6/9 would merge 0-2, 3-5 and 6-8,
# so that the broker and the workers could not tell 1 from 2 where the engine does).
BROKER_STEPS: tuple[int, ...] = tuple(range(HIGHEST, LOWEST + 1))
# Above one half the "reserved" share would outrank the highest priority.
MAX_SHARE = Fraction(1, 2)
# SCHEDULER_LOW_PRIORITY_SHARE's default: one start in ten.
DEFAULT_SHARE = Fraction(1, 10)

T = TypeVar("T")


def as_share(value: float | Fraction) -> Fraction:
    """A share in [0, MAX_SHARE] as an exact fraction (floats are rounded to 1/1000)."""
    share = Fraction(value).limit_denominator(1000)
    if not 0 <= share <= MAX_SHARE:
        raise ValueError(f"the low-priority share must be between 0 and {MAX_SHARE}, got {value}")
    return share


class ReservedShare:
    """Which end of the priority range the next pick starts from.

    ``lowest_first()`` says whether the coming pick is a reserved turn; ``taken()`` records
    that a pick happened (a consumer that found nothing to take calls nothing, so an idle
    wait spends no turn). Integer arithmetic in units of 1/denominator: it runs once per
    claimed firing in a spike's claim order.
    """

    def __init__(self, share: float | Fraction) -> None:
        self.share = as_share(share)
        self._num = self.share.numerator
        self._den = self.share.denominator
        # In [0, denominator): the part of a reserved turn accumulated since the last one.
        self._credit = 0

    def lowest_first(self) -> bool:
        return self._num > 0 and self._credit + self._num >= self._den

    def taken(self, picks: int = 1) -> None:
        self._credit = (self._credit + picks * self._num) % self._den

    def picks_before_reserved(self) -> int | None:
        """How many picks come before the next reserved turn (None: no share, never)."""
        if not self._num:
            return None
        # The reserved turn is the first pick j with credit + j * num >= denominator.
        return -(-(self._den - self._credit) // self._num) - 1


def pick(waiting: Iterable[int], *, lowest_first: bool) -> int:
    """The priority served from a non-empty set of waiting priorities."""
    levels = set(waiting)
    return max(levels) if lowest_first else min(levels)


def scan_order(steps: Sequence[int], *, lowest_first: bool) -> list[int]:
    """The order a consumer looks at its priority lists in: the first non-empty one is served,
    which is exactly ``pick`` of the non-empty ones."""
    ordered = sorted(steps)
    return ordered[::-1] if lowest_first else ordered


def order_by_priority(
    items: Sequence[T], *, priority_of: Callable[[T], int], share: ReservedShare
) -> list[T]:
    """``items`` highest priority first (stable within a priority), every reserved turn of
    ``share`` given to the first item of the lowest priority still left.

    The same choices as ``pick`` made once per item, taken a run of strict picks at a time:
    in a spike's claim order it runs over every due firing (20,000 of mixed priorities in
    27 ms on this host, one pick at a time in 108 ms).
    """
    buckets: dict[int, list[T]] = {}
    for item in items:
        level = priority_of(item)
        bucket = buckets.get(level)
        if bucket is None:
            buckets[level] = bucket = []
        bucket.append(item)
    if len(buckets) <= 1:
        # One priority (the usual backlog): the order stays as it is, the turns still pass.
        share.taken(len(items))
        return list(items)
    levels = sorted(buckets)
    queues = [buckets[level] for level in levels]
    starts = [0] * len(queues)
    ordered: list[T] = []
    left = len(items)
    while left:
        strict = share.picks_before_reserved()
        strict = left if strict is None else min(strict, left)
        share.taken(strict)
        left -= strict
        while strict:
            # The highest priority left is always queues[0]: emptied queues are dropped.
            queue, start = queues[0], starts[0]
            n = min(strict, len(queue) - start)
            ordered.extend(queue[start : start + n])
            strict -= n
            if start + n == len(queue):
                del queues[0], starts[0]
            else:
                starts[0] = start + n
        if left:
            # The reserved turn: the oldest item of the lowest priority left.
            ordered.append(queues[-1][starts[-1]])
            share.taken()
            left -= 1
            starts[-1] += 1
            if starts[-1] == len(queues[-1]):
                del queues[-1], starts[-1]
    return ordered
