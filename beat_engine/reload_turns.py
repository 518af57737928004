"""Which partitions a periodic refresh reloads whole.

A full reload picks up a change whose notification was lost. Reloading every partition's
horizon at once stalled the loop: at 2,000,000 registered schedules on two nodes it held every
firing due meanwhile back by 0.4-1.1 s, once a minute per node (bench/bench_scale.py). Each
refresh reloads a slice of the partitions instead, in turn, so every partition is still
reloaded whole about once per full_refresh_s while no refresh loads more than that slice.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable


class ReloadTurns:
    """The partitions whose turn it is, at each refresh, to be reloaded whole.

    ``take`` returns ceil(n x refresh_s / full_refresh_s) of the n partitions, starting after
    the last one it returned: with the same partitions each comes round every
    full_refresh_s (rounded up to a whole refresh_s). Partitions gained or lost in between
    only shift the turn; a partition just gained was loaded whole on taking it.
    """

    def __init__(self, refresh_s: float, full_refresh_s: float) -> None:
        self._share = 1.0 if full_refresh_s <= refresh_s else refresh_s / full_refresh_s
        self._last = -1

    def take(self, partitions: Iterable[int]) -> list[int]:
        parts = sorted(set(partitions))
        if not parts:
            return []
        count = min(len(parts), math.ceil(len(parts) * self._share))
        start = bisect.bisect_right(parts, self._last)
        chosen = [parts[(start + i) % len(parts)] for i in range(count)]
        self._last = chosen[-1]
        return chosen
