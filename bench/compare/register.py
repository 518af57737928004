"""Registers a case's jobs with one scheduler, run as a subprocess in that scheduler's settings.

``python -m bench.compare.register KIND REGISTERED DUE DUE_AT_ISO [TARGET_URL]``: the first DUE
jobs fire at DUE_AT, the rest twelve hours later. With TARGET_URL (the end-to-end scenario) each
firing POSTs ``{"firing": NAME}`` there: ours as an HTTP-target job, RedBeat's entries as a
plain Celery task that makes the same call (bench.compare.peer_app.http_fire). Every job is an
interval of one day whose previous firing was one day before its instant (ours: anchored at the
instant), so the instant can be any second, not only a minute boundary as a crontab would need.
Each peer gets its jobs the way its users create them in bulk, as fast as its storage allows:
rows for django-celery-beat and ours (bulk SQL copying one row the ORM created), entries in
Redis for RedBeat (pipelined).
Registration time is not part of any figure.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.compare.bulk import entry_name_sql, insert_copies

BATCH = 10_000
PERIOD = timedelta(days=1)
# Registered but not due: far enough not to fire during any run of a profile.
IDLE_AFTER = timedelta(hours=12)
# The task every peer entry sends, and the one that makes the end-to-end scenario's HTTP call.
NOOP_TASK = "bench.noop"
HTTP_TASK = "bench.http_fire"
# Ours and the peer's task give the target this long to answer.
HTTP_TIMEOUT = timedelta(seconds=30)


def entry_name(index: int) -> str:
    return f"job-{index:07d}"


def register_django_celery_beat(registered: int, due: int, due_at: datetime) -> None:
    import django

    django.setup()
    from django.db import connection
    from django_celery_beat.models import IntervalSchedule, PeriodicTask, PeriodicTasks

    # A raw delete: the ORM's delete() sends a signal per row, each bumping the change
    # counter, which takes minutes for the rows a previous case left behind.
    PeriodicTask.objects.all()._raw_delete(PeriodicTask.objects.db)
    every_day, _ = IntervalSchedule.objects.get_or_create(every=1, period=IntervalSchedule.DAYS)
    template = PeriodicTask.objects.create(
        name="template", task="bench.noop", interval=every_day, args="[]",
        last_run_at=due_at - PERIOD,
    )  # fmt: skip
    columns = [f.column for f in PeriodicTask._meta.concrete_fields if not f.primary_key]
    name = entry_name_sql("g")
    with connection.cursor() as cursor:
        for first, last, instant in ((0, due, due_at), (due, registered, due_at + IDLE_AFTER)):
            if first >= last:
                continue
            insert_copies(
                cursor, PeriodicTask._meta.db_table, columns, template.pk,
                {"name": name, "args": f"'[\"' || {name} || '\"]'", "last_run_at": "%s"},
                "generate_series(%s, %s) g", [instant - PERIOD, first, last - 1],
            )  # fmt: skip
    template.delete()
    # Neither raw SQL nor bulk inserts send the save() signal that bumps the change counter.
    PeriodicTasks.update_changed()


def register_redbeat(
    registered: int, due: int, due_at: datetime, target_url: str | None = None
) -> None:
    from celery.schedules import schedule
    from redbeat.decoder import RedBeatJSONEncoder
    from redbeat.schedulers import get_redis

    from bench.compare.peer_app import app

    client = get_redis(app)
    client.flushdb()
    every_day = schedule(run_every=PERIOD, app=app)
    prefix = app.redbeat_conf.key_prefix
    # RedBeatSchedulerEntry.save()'s writes, serialised once and pipelined: the definition
    # differs only by name, the meta only between due and idle entries.
    definition = json.dumps(
        {"name": "NAME", "task": HTTP_TASK if target_url else NOOP_TASK, "args": ["NAME"],
         "kwargs": {}, "options": {},
         "schedule": every_day, "enabled": True},
        cls=RedBeatJSONEncoder,
    )  # fmt: skip
    pipe = client.pipeline(transaction=False)
    for first, last, instant in ((0, due, due_at), (due, registered, due_at + IDLE_AFTER)):
        meta = json.dumps({"last_run_at": instant - PERIOD}, cls=RedBeatJSONEncoder)
        # The score is the instant in whole seconds, as RedBeat's to_timestamp writes it:
        # RedBeat's own due_at for a last_run_at that is not "now" is off by the difference.
        score = int(instant.timestamp())
        for start in range(first, last, BATCH):
            scores = {}
            for i in range(start, min(start + BATCH, last)):
                name = entry_name(i)
                key = prefix + name
                mapping = {"definition": definition.replace("NAME", name), "meta": meta}
                pipe.hset(key, mapping=mapping)
                scores[key] = score
            pipe.zadd(app.redbeat_conf.schedule_key, scores)
            pipe.execute()


def reset_ours() -> tuple[Any, int, datetime]:
    """Empty our tables and create the benchmark's tenant: (tenant, partitions, now)."""
    import django

    django.setup()
    from django.conf import settings
    from django.db import connection

    from jobs.models import Tenant

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE jobs_jobrun, jobs_job, jobs_partitionepoch, jobs_tenant CASCADE")
    now = datetime.now(UTC)
    tenant = Tenant.objects.create(name="bench", created_at=now)
    return tenant, int(settings.SCHEDULER["PARTITIONS"]), now


def register_ours(
    registered: int, due: int, due_at: datetime, target_url: str | None = None
) -> None:
    tenant, partitions, now = reset_ours()
    from django.db import connection

    from beat_engine.partitions import partition_for
    from jobs.models import Job, JobKind, TargetKind

    target: dict[str, Any] = {"target_kind": TargetKind.TASK, "target_name": NOOP_TASK}
    overrides: dict[str, str] = {}
    if target_url:
        target = {"target_kind": TargetKind.HTTP, "target_url": target_url,
                  "timeout": HTTP_TIMEOUT}  # fmt: skip
        overrides = {"payload": f"jsonb_build_object('firing', {entry_name_sql('g.i')})"}
    template = Job.objects.create(
        tenant=tenant, name="template", kind=JobKind.INTERVAL,
        interval_seconds=int(PERIOD.total_seconds()), anchor_at=due_at, timezone="UTC",
        next_fire_at=due_at, partition=0, created_at=now, updated_at=now, **target,
    )  # fmt: skip
    columns = [f.column for f in Job._meta.concrete_fields]
    with connection.cursor() as cursor:
        # Ids and partitions come from Python (partition_for is a blake2b of the id), the
        # rest of each row is the template's.
        cursor.execute("CREATE TEMP TABLE bench_ids (i int, id uuid, part smallint)")
        with cursor.copy("COPY bench_ids (i, id, part) FROM STDIN") as copy:
            for i in range(registered):
                job_id = uuid.uuid4()
                copy.write_row((i, job_id, partition_for(job_id, partitions)))
        for first, last, instant in ((0, due, due_at), (due, registered, due_at + IDLE_AFTER)):
            if first >= last:
                continue
            insert_copies(
                cursor, Job._meta.db_table, columns, template.pk,
                {"id": "g.id", "name": entry_name_sql("g.i"), "partition": "g.part",
                 "anchor_at": "%s", "next_fire_at": "%s", **overrides},
                "(SELECT * FROM bench_ids WHERE i >= %s AND i < %s) g",
                [instant, instant, first, last],
            )  # fmt: skip
        cursor.execute("DROP TABLE bench_ids")
    template.delete()


REGISTER: dict[str, Callable[..., None]] = {
    "django-celery-beat": register_django_celery_beat,
    "redbeat": register_redbeat,
    "ours": register_ours,
}


def main(argv: list[str]) -> None:
    kind, registered, due, due_at, *target_url = argv
    when = datetime.fromisoformat(due_at)
    if target_url:
        if kind == "django-celery-beat":
            raise SystemExit("an HTTP target is registered for ours and RedBeat only")
        REGISTER[kind](int(registered), int(due), when, target_url[0])
    else:
        REGISTER[kind](int(registered), int(due), when)


if __name__ == "__main__":
    main(sys.argv[1:])
