"""Steady scenario: interval jobs whose first firings are spread evenly over one period.

``entries`` jobs with period ``period_s`` give ``entries / period_s`` firings per second. The
peers' interval schedules re-anchor at each firing (``last_run_at`` becomes the send time), so
a peer's lateness is taken against its own due time (previous send + period); ours are
anchored (``anchor + k * period``), so ours is taken against ``scheduled_for``.
"""

from __future__ import annotations

import json
import math
import sys
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

BATCH = 5_000


@dataclass(frozen=True)
class SteadyPlan:
    entries: int
    period_s: int
    start_at: float  # epoch seconds of the first firing
    catchup: str = "skip"  # our jobs' catchup_policy

    def first_due(self, index: int) -> float:
        return self.start_at + self.period_s * index / self.entries

    def first_due_dt(self, index: int) -> datetime:
        return datetime.fromtimestamp(self.first_due(index), UTC)

    def to_json(self) -> str:
        return json.dumps(
            {"entries": self.entries, "period_s": self.period_s, "start_at": self.start_at,
             "catchup": self.catchup}
        )  # fmt: skip

    @classmethod
    def from_json(cls, raw: str) -> SteadyPlan:
        data = json.loads(raw)
        return cls(
            int(data["entries"]), int(data["period_s"]), float(data["start_at"]),
            str(data.get("catchup", "skip")),
        )  # fmt: skip


def entry_name(index: int) -> str:
    return f"job-{index:07d}"


def beat_schedule(plan: SteadyPlan) -> dict[str, Any]:
    """celery beat's ``beat_schedule``: ``last_run_at`` one period before each first firing
    (ScheduleEntry accepts it, and a fresh shelve keeps it)."""
    period = timedelta(seconds=plan.period_s)
    return {
        entry_name(i): {
            "task": "bench.noop",
            "schedule": period,
            "args": [entry_name(i)],
            "last_run_at": plan.first_due_dt(i) - period,
        }
        for i in range(plan.entries)
    }


def register_django_celery_beat(plan: SteadyPlan) -> None:
    import django

    django.setup()
    from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

    # A raw delete: the ORM's delete() sends a signal per row, each bumping the change
    # counter, which takes minutes for the 100,000 rows a previous case left behind.
    PeriodicTask.objects.all()._raw_delete(PeriodicTask.objects.db)
    interval, _ = IntervalSchedule.objects.get_or_create(
        every=plan.period_s, period=IntervalSchedule.SECONDS
    )
    period = timedelta(seconds=plan.period_s)
    rows = [
        PeriodicTask(
            name=entry_name(i),
            task="bench.noop",
            interval=interval,
            args=json.dumps([entry_name(i)]),
            last_run_at=plan.first_due_dt(i) - period,
        )
        for i in range(plan.entries)
    ]
    PeriodicTask.objects.bulk_create(rows, batch_size=BATCH)
    PeriodicTasks.update_changed()


def register_redbeat(plan: SteadyPlan) -> None:
    from celery.schedules import schedule
    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedulers import RedBeatSchedulerEntry, get_redis

    from bench.compare.peer_app import app

    client = get_redis(app)
    client.flushdb()
    every = schedule(run_every=timedelta(seconds=plan.period_s), app=app)
    pipe = client.pipeline(transaction=False)
    for i in range(plan.entries):
        name = entry_name(i)
        entry = RedBeatSchedulerEntry(name, "bench.noop", every, args=[name], app=app)
        last = plan.first_due_dt(i) - timedelta(seconds=plan.period_s)
        definition = {"name": name, "task": entry.task, "args": entry.args,
                      "kwargs": entry.kwargs, "options": entry.options,
                      "schedule": every, "enabled": True}  # fmt: skip
        pipe.hset(entry.key, "definition", json.dumps(definition, cls=RedBeatJSONEncoder))
        pipe.hset(entry.key, "meta", json.dumps({"last_run_at": last}, cls=RedBeatJSONEncoder))
        # Score = the first due instant in whole seconds, as RedBeat's to_timestamp writes it
        # (RedBeat's own score for a last_run_at that is not "now" would be off by the
        # difference; after the first firing it sets its own). A fractional score made RedBeat
        # burst: its tick reads due entries up to floor(now) and peeks at one more; that one,
        # already due, reports the period as its next check, so the beat slept a whole
        # max interval and then fired everything at once.
        score = math.floor(plan.first_due(i))
        pipe.zadd(app.redbeat_conf.schedule_key, {entry.key: score})
        if i % BATCH == BATCH - 1:
            pipe.execute()
    pipe.execute()


def register_ours(plan: SteadyPlan) -> None:
    from bench.compare.register import reset_ours

    tenant, partitions, now = reset_ours()
    from beat_engine.partitions import partition_for
    from jobs.models import Job, JobKind, TargetKind

    batch: list[Job] = []
    for i in range(plan.entries):
        job_id = uuid.uuid4()
        batch.append(
            Job(
                id=job_id, tenant=tenant, name=entry_name(i), kind=JobKind.INTERVAL,
                interval_seconds=plan.period_s, anchor_at=plan.first_due_dt(i),
                timezone="UTC", target_kind=TargetKind.TASK, target_name="bench.noop",
                next_fire_at=plan.first_due_dt(i), catchup_policy=plan.catchup,
                partition=partition_for(job_id, partitions), created_at=now, updated_at=now,
            )
        )  # fmt: skip
        if len(batch) == BATCH:
            Job.objects.bulk_create(batch)
            batch.clear()
    Job.objects.bulk_create(batch)


def peer_timeline(
    plan: SteadyPlan, published: list[tuple[str, float]]
) -> list[tuple[float, float]]:
    """(publish time, lateness) for the peers, each against the previous publish of its entry
    plus the period, the due time the peer itself computes."""
    previous: dict[str, float] = {}
    index = {entry_name(i): i for i in range(plan.entries)}
    timeline = []
    for name, at in sorted(published, key=lambda pair: pair[1]):
        due = previous[name] + plan.period_s if name in previous else plan.first_due(index[name])
        timeline.append((at, at - due))
        previous[name] = at
    return timeline


def expected_grid(plan: SteadyPlan, until: float) -> dict[str, list[float]]:
    """For ours: every anchored firing due before ``until``."""
    grid: dict[str, list[float]] = defaultdict(list)
    for i in range(plan.entries):
        at = plan.first_due(i)
        while at < until:
            grid[entry_name(i)].append(at)
            at += plan.period_s
    return grid


REGISTER = {
    "django-celery-beat": register_django_celery_beat,
    "redbeat": register_redbeat,
    "ours": register_ours,
}

if __name__ == "__main__":
    REGISTER[sys.argv[1]](SteadyPlan.from_json(sys.argv[2]))
