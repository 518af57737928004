"""The fault plan of a soak, drawn from a seed: which process dies when, and for how long.

Pure: the same seed and profile always give the same plan, so a failing soak can be run again
with the very same faults (``--seed``).
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class FaultKind(StrEnum):
    # SIGKILL of a `manage.py beat_engine` node, restarted with the same node id.
    BEAT_KILL = "beat-kill"
    # SIGKILL of a Celery worker and its pool children, restarted as a new worker.
    WORKER_KILL = "worker-kill"
    # Redis stopped and started again on the same socket and data folder.
    REDIS_RESTART = "redis-restart"


@dataclass(frozen=True)
class FaultRule:
    """How often one kind of fault happens and how long its victim stays down."""

    mean_gap_s: float
    down_s: tuple[float, float]
    targets: int  # how many processes of this kind there are (Redis: 1)
    minimum: int = 1  # faults of this kind in any plan, however short the window


@dataclass(frozen=True)
class Fault:
    at_s: float  # seconds after the first firing
    kind: FaultKind
    target: int
    down_s: float

    @property
    def back_s(self) -> float:
        return self.at_s + self.down_s


@dataclass(frozen=True)
class Action:
    """One step of the plan as the harness runs it: a victim goes down, or comes back."""

    at_s: float
    kind: FaultKind
    target: int
    up: bool


def fault_plan(
    seed: int,
    *,
    start_s: float,
    end_s: float,
    rules: Mapping[FaultKind, FaultRule],
    settle_s: float = 5.0,
) -> list[Fault]:
    """Faults in [start_s, end_s], every victim back up by ``end_s``.

    Each kind gets ``max(minimum, window / mean_gap)`` faults, one at a random instant in each
    of as many equal slots of the window, so they are spread over the whole soak rather than
    bunched. A fault on a target that is still down (or restarted less than ``settle_s`` ago)
    goes to the target free first, at the earliest once it is back; a fault that then no longer
    fits in the window is dropped (only when faults are denser than the victims' outages).
    """
    if end_s <= start_s:
        raise ValueError("the fault window must not be empty")
    rng = random.Random(seed)
    faults: list[Fault] = []
    for kind in FaultKind:
        rule = rules.get(kind)
        if rule is None:
            continue
        count = max(rule.minimum, round((end_s - start_s) / rule.mean_gap_s))
        slot = (end_s - start_s) / count
        busy_until = [start_s] * rule.targets
        for i in range(count):
            target = rng.randrange(rule.targets)
            down = rng.uniform(*rule.down_s)
            # Drawn so that the victim is back before the slot ends (or as early as it can).
            low = start_s + i * slot
            at = rng.uniform(low, max(low, min(low + slot, end_s) - down))
            if busy_until[target] > at:
                target = min(range(rule.targets), key=lambda t: busy_until[t])
                at = max(at, busy_until[target])
            if at + down > end_s:
                continue
            busy_until[target] = at + down + settle_s
            faults.append(Fault(round(at, 3), kind, target, round(down, 3)))
    return sorted(faults, key=lambda f: (f.at_s, f.kind, f.target))


def actions(faults: list[Fault]) -> list[Action]:
    """The plan as down and up steps in time order (an up step never precedes its down)."""
    steps = [Action(f.at_s, f.kind, f.target, up=False) for f in faults]
    steps += [Action(f.back_s, f.kind, f.target, up=True) for f in faults]
    return sorted(steps, key=lambda a: (a.at_s, a.up))
