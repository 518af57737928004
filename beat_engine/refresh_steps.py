"""The periodic refresh of the horizon, in steps of a bounded number of rows.

A refresh loads the jobs whose next firing entered the look-ahead horizon since the last one.
At a minute boundary those are every job due at it, at once: at 2,000,000 registered
schedules on two nodes the refresh that loaded a minute's hourly crons and a spike (35,000
rows a node) held the loop for about 1.2 s, and every firing due meanwhile was late by as
much (bench/bench_scale.py). A pass is therefore cut into steps of at most ``step_rows`` rows,
one step a tick, each partition's next page resuming after the row its last one ended at (the
keyset (next_fire_at, id) of index job_due_keyset: jobs tied at one instant are paged too).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime

Resume = tuple[datetime, uuid.UUID]


class RefreshSteps:
    """Which partitions the next step of a pass loads, and from where.

    ``begin`` starts a pass over some partitions; ``step`` names the partitions of the next
    step, the rows each may load and the rows they resume after; ``ended`` takes the rows
    where the step's full pages ended: those partitions go on at the next step, the others
    are done. The pass is over when no partition is left.
    """

    def __init__(self, step_rows: int) -> None:
        self._step_rows = max(1, step_rows)
        self._left: list[int] = []
        self._resume: dict[int, Resume] = {}

    @property
    def going(self) -> bool:
        return bool(self._left)

    def begin(self, partitions: Iterable[int]) -> None:
        self._left = sorted(set(partitions))
        self._resume = {}

    def step(self) -> tuple[list[int], int, dict[int, Resume]]:
        """The partitions of the next step, the rows each may load (the step's rows shared
        among them, at least one) and the rows they resume after."""
        if not self._left:
            return [], 0, {}
        per_partition = max(1, math.ceil(self._step_rows / len(self._left)))
        return list(self._left), per_partition, dict(self._resume)

    def ended(self, resume: Mapping[int, Resume]) -> None:
        """The step is loaded: partitions whose page was full go on after their last row."""
        self._resume = {p: row for p, row in resume.items() if p in self._left}
        self._left = sorted(self._resume)

    def forget(self, partitions: Iterable[int]) -> None:
        """Partitions no longer served: the pass does not go on with them."""
        gone = set(partitions)
        self._left = [p for p in self._left if p not in gone]
        self._resume = {p: row for p, row in self._resume.items() if p not in gone}
