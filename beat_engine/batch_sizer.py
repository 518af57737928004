"""BatchSizer: how many due firings the next claim batch takes, from how long the last ones took
(pure, no I/O, no clock: the engine passes the durations it measured).

While a backlog drains, a firing of another tenant that falls due waits for the claim batch in
hand (beat_engine/engine.py, _claim_behind): the batch's preparation and its commit, a second
or more for 1,000 rows on a host whose workers take most of the CPU, while the same batch
commits in 70 ms on an idle one. A fixed row count cannot bound that wait, so the size follows
the measured time per row:

    size = target_s / (seconds per row), within [least, most]

``most`` is the claim_batch setting: a fast database keeps it (1,000 rows well under the target),
and only a slow claim shrinks the batch, down to ``least`` rows so that the per-batch costs
(fence, round trips) never dominate. The time per row is a moving average of the batches
observed (``smoothing`` of each new one), so one slow commit shrinks the next batches a little
and a run of them a lot; a batch's fixed cost counts in its time per row, so the size settles
where a batch takes about ``target_s`` all in. Batches smaller than ``least`` (the tail of a
backlog, a latecomer's batch of one) say more about that fixed cost than about the rows, and
are not observed.
"""

from __future__ import annotations

DEFAULT_TARGET_S = 0.25
DEFAULT_LEAST = 100
DEFAULT_SMOOTHING = 0.3


class BatchSizer:
    def __init__(
        self,
        *,
        most: int,
        target_s: float = DEFAULT_TARGET_S,
        least: int = DEFAULT_LEAST,
        smoothing: float = DEFAULT_SMOOTHING,
    ) -> None:
        if most < 1:
            raise ValueError("a claim batch takes at least one firing")
        if target_s < 0:
            raise ValueError("a batch's target time is positive, or 0 for a fixed size")
        if not 0 < smoothing <= 1:
            raise ValueError("the smoothing of the time per row is in (0, 1]")
        self.most = most
        self.least = max(1, min(least, most))
        self.target_s = target_s
        self._smoothing = smoothing
        # Seconds per row, averaged over the batches observed; None until the first.
        self._per_row: float | None = None

    @property
    def per_row_s(self) -> float | None:
        return self._per_row

    def size(self) -> int:
        """Rows for the next batch: ``most`` until a batch was measured (or with no target)."""
        if not self.target_s or not self._per_row:
            return self.most
        return max(self.least, min(self.most, int(self.target_s / self._per_row)))

    def observed(self, rows: int, seconds: float) -> None:
        """A batch of ``rows`` took ``seconds``, from its preparation awaited to its push."""
        if rows < self.least or seconds < 0:
            return
        per_row = seconds / rows
        if self._per_row is None:
            self._per_row = per_row
        else:
            self._per_row += self._smoothing * (per_row - self._per_row)
