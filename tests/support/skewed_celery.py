"""`python -m tests.support.skewed_celery <celery arguments>`: a Celery worker whose wall clock
is off by SCHEDULER_TEST_WALL_CLOCK_OFFSET_S seconds.

The project reads the wall clock in one place, beat_engine/clock.py (ruff bans every other
way), so offsetting SystemClock.now() there is this process's clock being wrong, as a host
whose NTP failed would be, for everything the scheduler computes; the monotonic clock is left
alone, as a wall-clock step leaves it. Pool children are forked from this process and keep
the offset.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timedelta

from beat_engine import clock

OFFSET = timedelta(seconds=float(os.environ.get("SCHEDULER_TEST_WALL_CLOCK_OFFSET_S", "0")))
_real_now = clock.SystemClock.now


def _skewed_now(self: clock.SystemClock) -> datetime:
    return _real_now(self) + OFFSET


def main() -> None:
    clock.SystemClock.now = _skewed_now  # type: ignore[method-assign]
    from celery.__main__ import main as celery_main

    sys.argv[0] = "celery"
    celery_main()


if __name__ == "__main__":
    main()
