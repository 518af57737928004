"""Upcoming-load forecast on many jobs: the grouping statement, the evaluation, the whole read.

Run manually (not in CI):  .venv/bin/python bench/bench_upcoming.py [--jobs 1000000]
Uses DATABASE_URL/REDIS_URL when both are set, else starts embedded servers in
.local/bench-upcoming. Seeds the jobs with one INSERT ... SELECT (70 % cron over 1,440
expressions and 8 zones, 30 % 5-minute intervals with random anchors; 4 tenants; a third
jittered), then prints medians of 5 reads. Writes no docs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ZONES = [
    "UTC", "Europe/Paris", "America/New_York", "Asia/Tokyo", "Australia/Sydney",
    "America/Los_Angeles", "Europe/London", "Asia/Kolkata",
]  # fmt: skip


def _services() -> Any:
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return None
    from scheduler_project.embedded import EmbeddedServices

    services = EmbeddedServices(ROOT / ".local" / "bench-upcoming")
    os.environ.update(services.start())
    return services


def _seed(count: int, now: datetime) -> None:
    from django.db import connection

    from jobs.models import Job, Tenant
    from jobs.services.jobs import JobInput, job_create

    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM jobs_job")
    tenants = [
        Tenant.objects.get_or_create(name=f"bench-{i}", defaults={"created_at": now})[0]
        for i in range(4)
    ]
    template = job_create(
        tenant=tenants[0],
        data=JobInput(name="template", target_kind="callable", target_name="demo.heartbeat",
                      cron="0 0 * * *"),
        now=now,
    )  # fmt: skip
    columns = [f.column for f in Job._meta.concrete_fields]
    varied = {
        "id": "gen_random_uuid()",
        "tenant_id": f"(ARRAY[{','.join(str(t.pk) for t in tenants)}])[1 + i %% 4]",
        "name": "'job-' || i",
        "kind": "CASE WHEN i %% 10 < 7 THEN 'cron' ELSE 'interval' END",
        "cron_expression": (
            "CASE WHEN i %% 10 < 7 THEN ((i / 7) %% 60)::text || ' ' || ((i / 420) %% 24)::text"
            " || ' * * *' ELSE '' END"
        ),
        "interval_seconds": "CASE WHEN i %% 10 < 7 THEN NULL ELSE 300 END",
        "anchor_at": (
            "CASE WHEN i %% 10 < 7 THEN NULL ELSE %(now)s - (random() * 86400) * interval '1 s' END"
        ),
        "timezone": f"(ARRAY[{','.join(repr(z) for z in ZONES)}])[1 + (i / 3) %% {len(ZONES)}]",
        "jitter_window": "CASE WHEN i %% 3 = 0 THEN interval '60 s' ELSE interval '0' END",
        "partition": "i %% 64",
    }
    select = ", ".join(varied.get(column, f"t.{column}") for column in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO jobs_job ({', '.join(columns)}) SELECT {select} "
            f"FROM jobs_job t, generate_series(1, %(count)s) AS i WHERE t.id = %(template)s",
            {"count": count, "template": template.id, "now": now},
        )
        cursor.execute("DELETE FROM jobs_job WHERE id = %s", [template.id])
        cursor.execute("ANALYZE jobs_job")


def _median_ms(read: Any, runs: int = 5) -> tuple[float, Any]:
    times, value = [], None
    for _ in range(runs):
        started = time.perf_counter()
        value = read()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1_000_000)
    args = parser.parse_args()
    services = _services()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    try:
        import django

        django.setup()
        from django.core.management import call_command

        from beat_engine.load_forecast import forecast_load
        from jobs.upcoming_load import schedule_groups, upcoming_load

        call_command("migrate", verbosity=0)
        now = datetime.now(UTC)
        started = time.perf_counter()
        _seed(args.jobs, now)
        print(f"seeded {args.jobs:,} jobs in {time.perf_counter() - started:.1f} s", flush=True)
        day = timedelta(hours=24)
        group_ms, (groups, _) = _median_ms(lambda: schedule_groups(now=now, horizon=day))
        forecast_ms, forecast = _median_ms(lambda: forecast_load(groups, now=now, horizon=day))
        whole_ms, _ = _median_ms(lambda: upcoming_load(now=now))
        print(
            f"{args.jobs:,} jobs -> {len(groups):,} groups, {forecast.groups_evaluated:,} distinct"
            f" schedules evaluated, {sum(forecast.totals()):,.0f} firings in 24 h\n"
            f"grouping statement {group_ms:,.0f} ms, evaluation {forecast_ms:,.0f} ms, "
            f"whole read {whole_ms:,.0f} ms (medians of 5)"
        )
    finally:
        if services is not None:
            services.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
