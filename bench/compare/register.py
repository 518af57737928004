"""Registers a case's jobs with one scheduler, run as a subprocess in that scheduler's settings.

``python -m bench.compare.register KIND REGISTERED DUE DUE_AT_ISO``: the first DUE jobs fire at
DUE_AT (a minute boundary), the rest twelve hours later. Each peer gets its jobs the way its
users create them in bulk: rows for django-celery-beat, entries in Redis for RedBeat, rows in
``jobs_job`` for ours. Registration time is not part of any figure.
"""

from __future__ import annotations

import json
import sys
import uuid
from datetime import UTC, datetime, timedelta

BATCH = 5_000


def entry_name(index: int) -> str:
    return f"job-{index:07d}"


def register_django_celery_beat(registered: int, due: int, due_at: datetime) -> None:
    import django

    django.setup()
    from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks

    # A raw delete: the ORM's delete() sends a signal per row, each bumping the change
    # counter, which takes minutes for the 100,000 rows a previous case left behind.
    PeriodicTask.objects.all()._raw_delete(PeriodicTask.objects.db)
    due_cron, _ = CrontabSchedule.objects.get_or_create(
        minute=str(due_at.minute), hour=str(due_at.hour), timezone="UTC"
    )
    idle_cron, _ = CrontabSchedule.objects.get_or_create(
        minute=str(due_at.minute), hour=str((due_at.hour + 12) % 24), timezone="UTC"
    )
    rows = [
        PeriodicTask(
            name=entry_name(i),
            task="bench.noop",
            crontab=due_cron if i < due else idle_cron,
            args=json.dumps([entry_name(i)]),
        )
        for i in range(registered)
    ]
    PeriodicTask.objects.bulk_create(rows, batch_size=BATCH)
    # bulk_create skips the save() signal that bumps the change counter; bump it ourselves.
    PeriodicTasks.update_changed()


def register_redbeat(registered: int, due: int, due_at: datetime) -> None:
    from celery.schedules import crontab
    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedulers import RedBeatSchedulerEntry, get_redis

    from bench.compare.peer_app import app

    client = get_redis(app)
    client.flushdb()
    now = datetime.now(UTC)
    due_cron = crontab(minute=due_at.minute, hour=due_at.hour)
    idle_cron = crontab(minute=due_at.minute, hour=(due_at.hour + 12) % 24)
    pipe = client.pipeline(transaction=False)
    for i in range(registered):
        name = entry_name(i)
        entry = RedBeatSchedulerEntry(
            name, "bench.noop", due_cron if i < due else idle_cron, args=[name], app=app
        )
        entry.last_run_at = now
        # The same three writes as RedBeatSchedulerEntry.save(), pipelined across entries so
        # that registering 100,000 entries takes seconds rather than minutes.
        definition = {
            "name": name,
            "task": entry.task,
            "args": entry.args,
            "kwargs": entry.kwargs,
            "options": entry.options,
            "schedule": entry.schedule,
            "enabled": True,
        }
        pipe.hset(entry.key, "definition", json.dumps(definition, cls=RedBeatJSONEncoder))
        pipe.hsetnx(entry.key, "meta", json.dumps({"last_run_at": now}, cls=RedBeatJSONEncoder))
        pipe.zadd(app.redbeat_conf.schedule_key, {entry.key: entry.score})
        if i % BATCH == BATCH - 1:
            pipe.execute()
    pipe.execute()


def register_ours(registered: int, due: int, due_at: datetime) -> None:
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from beat_engine.partitions import partition_for
    from jobs.models import Job, JobKind, TargetKind, Tenant

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_jobrun, jobs_job, jobs_partitionepoch, jobs_tenant CASCADE")
    now = datetime.now(UTC)
    tenant = Tenant.objects.create(name="bench", created_at=now)
    partitions = int(settings.SCHEDULER["PARTITIONS"])
    idle_at = due_at + timedelta(hours=12)
    batch: list[Job] = []
    for i in range(registered):
        job_id = uuid.uuid4()
        cron = f"{due_at.minute} {due_at.hour if i < due else idle_at.hour} * * *"
        batch.append(
            Job(
                id=job_id,
                tenant=tenant,
                name=entry_name(i),
                kind=JobKind.CRON,
                cron_expression=cron,
                timezone="UTC",
                target_kind=TargetKind.TASK,
                target_name="bench.noop",
                next_fire_at=due_at if i < due else idle_at,
                partition=partition_for(job_id, partitions),
                created_at=now,
                updated_at=now,
            )
        )
        if len(batch) == BATCH:
            Job.objects.bulk_create(batch)
            batch.clear()
    Job.objects.bulk_create(batch)


REGISTER = {
    "django-celery-beat": register_django_celery_beat,
    "redbeat": register_redbeat,
    "ours": register_ours,
}


def main(argv: list[str]) -> None:
    kind, registered, due, due_at = argv
    REGISTER[kind](int(registered), int(due), datetime.fromisoformat(due_at))


if __name__ == "__main__":
    main(sys.argv[1:])
