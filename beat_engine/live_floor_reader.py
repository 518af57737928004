"""The live floor's read (beat_engine/live_floor.py), on a thread of its own.

The read is one unbounded statement over every day partition: 117 ms warm and 236 ms to plan
cold beside a month of history (35 partitions). On the tick's thread it would hold the claim
loop that long every ``READ_EVERY_S``; here the tick only asks for it (``request()``, when the
floor is due) and goes on with the floor it has, or unbounded. A failed read is logged and
leaves the floor as it was: once it is a whole interval old the passes go unbounded, which is
slower, never wrong.
"""

from __future__ import annotations

import logging

from django.db import connection

from beat_engine.clock import Clock
from beat_engine.duty_thread import DutyThread
from beat_engine.live_floor import LiveFloor
from beat_engine.timers import oldest_live_firing

logger = logging.getLogger("beat_engine")


class LiveFloorReader(DutyThread):
    def __init__(self, floor: LiveFloor, *, clock: Clock, node_id: str) -> None:
        super().__init__(thread_name="beat-live-floor")
        self._floor = floor
        self._clock = clock
        self._node_id = node_id

    def work(self) -> None:
        # Both instants before the statement: a run that turns live while it runs is either in
        # its snapshot or newer than the read, and the next read is due no later for it.
        now = self._clock.now()
        mono = self._clock.monotonic()
        try:
            oldest = oldest_live_firing()
        except Exception:  # the thread's one broad except: a failed read waits for the next
            logger.warning("beat.live_floor_failed", extra={"node": self._node_id}, exc_info=True)
            return
        finally:
            # Closed before the pass counts as done: a read every 30 s keeps no session open
            # between them (and a test counting sessions sees the same number after a read).
            connection.close()
        self._floor.read(oldest, now=now, mono=mono)
        self.passes += 1
