"""A broker queue's bound sized from how fast its workers drain it (pure, no I/O, no clock).

Backpressure (beat_engine/backpressure.py) stops pushing to a queue at its bound, so a run
claimed while a burst drains starts after at most ``bound`` messages: after about
``bound / drain rate`` seconds. A fixed bound cannot be right for every queue: 100,000
messages are minutes of waiting for workers that run 40 runs/s, and 100 messages throttle
workers that run 10,000/s. So the bound follows the queue's measured drain rate:

    bound = max(floor, drain rate x target_wait_s), at most ``cap``

The drain rate comes from the depth readings the outbox takes anyway, and from what this
node pushed between them: drained = depth then + pushed since - depth now, over a window of
``window_s`` (the reading at or before the window's start is the base, so short gaps between
readings do not make the rate jump).

A window whose readings were all non-empty measured the workers' real rate: they had work
all along. A window in which the queue was seen empty measured only what was offered, a
lower bound of what the workers can take; it never lowers the bound. And if the queue is
found empty while runs are held back, less than ``target_wait_s`` after the reading before,
the workers took more than a bound in less than the target wait: the bound doubles (the fast
queue is throttled for a few readings, not for good). Messages other nodes push
to the queue are not seen; they make the measured rate lower, never higher, so the bound
errs on the side of a shorter wait.

A queue from which nothing has been taken for ``stall_s`` while messages waited has no
worker reading it (none started yet, or all gone): no drain rate says how long a wait is
there, holding runs back in the node would only move them from Redis's memory to the node's,
and the fixed ``cap`` bounds Redis's. Its bound is the cap until a message is taken again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

DEFAULT_TARGET_WAIT_S = 1.0
DEFAULT_FLOOR = 50
DEFAULT_WINDOW_S = 2.0
DEFAULT_STALL_S = 10.0
# A rate measured over less than this is noise (one worker's prefetch, one batch's push).
_MIN_SPAN_S = 0.5


@dataclass(frozen=True)
class _Reading:
    mono: float
    depth: int
    # Messages this node had pushed to the queue, in total, when the depth was read.
    pushed: int


class _Queue:
    def __init__(self, bound: int) -> None:
        self.bound = bound
        self.readings: deque[_Reading] = deque()
        self.rate: float | None = None
        # When a message was last seen taken (or the queue empty): a queue with messages and
        # none taken for stall_s has no worker.
        self.drained_mono: float | None = None


class DrainBound:
    """Each queue's bound from its drain rate; ``observed`` takes a depth reading."""

    def __init__(
        self,
        *,
        cap: int,
        target_wait_s: float = DEFAULT_TARGET_WAIT_S,
        floor: int = DEFAULT_FLOOR,
        window_s: float = DEFAULT_WINDOW_S,
        stall_s: float = DEFAULT_STALL_S,
    ) -> None:
        if target_wait_s <= 0 or floor < 1 or window_s <= 0:
            raise ValueError("an adaptive bound needs a positive target wait, floor and window")
        # cap 0 is "no fixed bound": the adaptive one still applies.
        self.cap = cap if cap > 0 else 1 << 62
        self.floor = min(floor, self.cap)
        self.target_wait_s = target_wait_s
        self.window_s = window_s
        self.stall_s = stall_s
        self._queues: dict[str, _Queue] = {}

    def bound(self, queue: str) -> int:
        """The queue's bound now: the floor until its drain has been measured, the cap while
        no worker takes from it."""
        state = self._queues.get(queue)
        if state is None:
            return self.floor
        if state.readings and self._stalled(state, state.readings[-1].mono):
            return self.cap
        return state.bound

    def rate(self, queue: str) -> float | None:
        """Messages per second the workers took, from the last window that measured it."""
        state = self._queues.get(queue)
        return None if state is None else state.rate

    def observed(self, queue: str, *, depth: int, pushed: int, mono: float, holding: bool) -> int:
        """A depth reading: ``pushed``, how many messages this node had pushed to the queue in
        total when it read; ``holding``, whether runs wait for room in it. Returns the bound."""
        state = self._queues.get(queue)
        if state is None:
            state = self._queues[queue] = _Queue(self.floor)
        readings = state.readings
        last = readings[-1] if readings else None
        if last is None or depth == 0 or last.depth + (pushed - last.pushed) > depth:
            state.drained_mono = mono
        reading = _Reading(mono, depth, pushed)
        if readings and readings[-1].mono >= mono:
            readings[-1] = reading  # two reads at one instant: the later counts
        else:
            readings.append(reading)
        # Keep the newest reading at or before the window's start as the base.
        while len(readings) > 2 and readings[1].mono <= mono - self.window_s:
            readings.popleft()
        base = readings[0]
        span = mono - base.mono
        starved = any(r.depth == 0 for r in readings)
        if span >= _MIN_SPAN_S:
            drained = base.depth + (pushed - base.pushed) - depth
            rate = max(0.0, drained / span)
            sized = round(rate * self.target_wait_s)
            if not starved:
                # The workers had messages all along: this is their rate.
                state.rate = rate
                state.bound = sized
            elif state.rate is None or rate > state.rate:
                # A lower bound of their rate: it may raise the bound, never lower it.
                state.rate = rate
                state.bound = max(state.bound, sized)
        if depth == 0 and holding and last is not None and mono - last.mono <= self.target_wait_s:
            # Runs waited while the workers emptied the queue in less than the target wait:
            # they take more than bound / target_wait_s, the bound is too small for them. (An
            # emptied queue after a longer gap says the node was late to refill it, not that
            # the workers are fast: a bound grown for the node's pauses would be a longer wait.)
            state.bound = 2 * state.bound
        state.bound = min(self.cap, max(self.floor, state.bound))
        if self._stalled(state, mono):
            return self.cap
        return state.bound

    def _stalled(self, state: _Queue, mono: float) -> bool:
        """Nothing taken for stall_s with messages waiting: no worker reads the queue."""
        return state.drained_mono is not None and mono - state.drained_mono >= self.stall_s
