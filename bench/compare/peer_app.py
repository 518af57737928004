"""The Celery app every peer's ``celery beat`` process loads (``-A bench.compare.peer_app``).

It configures the peer from the environment the harness sets, and adds two observation hooks
that cost the beat process almost nothing: an ``after_task_publish`` receiver that records
(entry name, wall-clock time) for every message once the broker has accepted it, and a
one-shot marker written at the scheduler's first tick (its schedule is loaded by then).
"""

from __future__ import annotations

import atexit
import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

PEER = os.environ.get("BENCH_PEER", "celery-beat")
OUT_DIR = Path(os.environ.get("BENCH_OUT_DIR", "."))
TASK_NAME = "bench.noop"
HTTP_TASK_NAME = "bench.http_fire"
# The end-to-end scenario's target, for the workers running HTTP_TASK_NAME.
TARGET_URL = os.environ.get("BENCH_TARGET_URL", "")

if PEER == "django-celery-beat":
    # DatabaseScheduler needs Django's ORM ready before the scheduler class is imported.
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.compare.dcb_settings")
    import django

    django.setup()

from celery import Celery  # noqa: E402
from celery.schedules import schedule as every  # noqa: E402
from celery.signals import after_task_publish  # noqa: E402

from bench.plain_http import post_firing  # noqa: E402

app = Celery("bench_peer", broker=os.environ.get("BENCH_BROKER_URL", "memory://"))
app.conf.update(
    timezone="UTC",
    enable_utc=True,
    task_serializer="json",
    broker_connection_retry_on_startup=True,
    redbeat_redis_url=os.environ.get("BENCH_REDIS_URL", ""),
)
if os.environ.get("BENCH_REDBEAT_LOCK_TIMEOUT"):
    app.conf.redbeat_lock_timeout = float(os.environ["BENCH_REDBEAT_LOCK_TIMEOUT"])
if os.environ.get("BENCH_MAX_LOOP_S"):
    app.conf.beat_max_loop_interval = float(os.environ["BENCH_MAX_LOOP_S"])
TAG = os.environ.get("BENCH_TAG", "")
FLUSH_S = float(os.environ.get("BENCH_FLUSH_S", "0.25"))


def entry_name(index: int) -> str:
    return f"job-{index:07d}"


def interval_entries(registered: int, due: int, due_at: float) -> dict[str, Any]:
    """``beat_schedule`` for PersistentScheduler: daily intervals whose ``last_run_at`` is one
    day before ``due_at`` for the first ``due`` entries, so they fall due at that second
    (schedule.is_due: last_run_at + run_every <= now); the rest twelve hours later, so they
    are registered but not due. ScheduleEntry keeps ``last_run_at`` and a fresh shelve file
    has nothing to override it with."""
    period = timedelta(days=1)
    daily = every(period)
    instant = datetime.fromtimestamp(due_at, UTC)
    last_due, last_idle = instant - period, instant + timedelta(hours=12) - period
    return {
        entry_name(index): {
            "task": TASK_NAME,
            "schedule": daily,
            "args": [entry_name(index)],
            "last_run_at": last_due if index < due else last_idle,
        }
        for index in range(registered)
    }


@app.task(name=HTTP_TASK_NAME)
def http_fire(firing: str) -> int:
    """What a RedBeat user's entry runs to call an HTTP endpoint: a plain Celery task making
    the call ours makes (bench/plain_http.py)."""
    return post_firing(TARGET_URL, firing)


if PEER == "celery-beat" and os.environ.get("BENCH_STEADY"):
    from bench.compare.steady import SteadyPlan, beat_schedule

    app.conf.beat_schedule = beat_schedule(SteadyPlan.from_json(os.environ["BENCH_STEADY"]))
elif PEER == "celery-beat" and os.environ.get("BENCH_SPEC"):
    spec = json.loads(os.environ["BENCH_SPEC"])
    app.conf.beat_schedule = interval_entries(spec["registered"], spec["due"], spec["due_at"])


class _PublishLog:
    """Buffered (name, time) lines; flushed at most every 0.25 s and at exit, so the hook
    adds a list append per message, not a write system call."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lines: list[str] = []
        self._flushed_at = time.monotonic()

    def add(self, name: str, at: float) -> None:
        self._lines.append(f"{name}\t{at:.6f}\n")
        if time.monotonic() - self._flushed_at >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        self._file.writelines(self._lines)
        self._file.flush()
        self._lines.clear()
        self._flushed_at = time.monotonic()


_log = _PublishLog(OUT_DIR / f"publish{TAG}.log") if "BENCH_OUT_DIR" in os.environ else None
if _log is not None:
    atexit.register(_log.flush)


@after_task_publish.connect
def _record_publish(sender: str | None = None, body: Any = None, **_: Any) -> None:
    # Protocol 2 body is (args, kwargs, embed); our entries carry their own name as args[0].
    if _log is not None and sender == TASK_NAME:
        _log.add(str(body[0][0]), time.time())


def _scheduler_class() -> type:
    if PEER == "redbeat":
        from redbeat import RedBeatScheduler

        return RedBeatScheduler
    if PEER == "django-celery-beat":
        from django_celery_beat.schedulers import DatabaseScheduler

        return DatabaseScheduler
    from celery.beat import PersistentScheduler

    return PersistentScheduler


def _mark_first_tick() -> None:
    cls = _scheduler_class()
    original = cls.tick
    marker = OUT_DIR / "ready"
    # Per process: in failover runs, the beat that ticks is the one holding RedBeat's lock.
    mine = OUT_DIR / f"ticked-{TAG}" if TAG else None

    def tick(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not marker.exists():
            marker.write_text(f"{time.time():.6f}\n")
        if mine is not None and not mine.exists():
            mine.write_text(f"{time.time():.6f}\n")
        return original(self, *args, **kwargs)

    cls.tick = tick


if "BENCH_OUT_DIR" in os.environ:
    _mark_first_tick()
