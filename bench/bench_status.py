"""Status pages benchmark: the overview's statements and pages on a large run history.

    .venv/bin/python bench/bench_status.py [--runs 1000000] [--days 7] [--jobs 2000]

Seeds ``--runs`` finished runs spread evenly over the last ``--days`` days (so the last hour
holds runs/days/24 of them) for ``--jobs`` jobs in 4 tenants, with attempts for the retried
ones and dead letters for the dead ones, then prints, for each overview statement, its median
time over 5 runs and the top of its EXPLAIN (ANALYZE, BUFFERS) plan, and the median time of
each page for a superuser and for one tenant's staff. Starts embedded PostgreSQL and Redis
under .local/bench_status unless DATABASE_URL and REDIS_URL are set. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _setup(services_dir: Path) -> Any:
    from scheduler_project.embedded import EmbeddedServices

    embedded = None
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        embedded = EmbeddedServices(services_dir)
        os.environ.update(embedded.start())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "--noinput", verbosity=0)
    return embedded


SEED_RUNS_SQL = """
INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state,
                         attempt, epoch, dedup_key, worker, cancel_requested, queued_at,
                         published_at, started_at, finished_at, lateness, start_lag,
                         last_error, replayed_count, created_at)
SELECT jobs_run_id(s.at), j.id, j.tenant_id, j.partition, s.at, 'schedule',
       CASE WHEN mod(s.n, 500) = 0 THEN 'dead' WHEN mod(s.n, 97) = 0 THEN 'failed'
            ELSE 'succeeded' END,
       CASE WHEN mod(s.n, 500) = 0 THEN 3 WHEN mod(s.n, 50) = 0 THEN 2 ELSE 1 END,
       1, md5(s.n::text), 'bench-worker', false, s.at, s.at + interval '40 ms',
       s.at + interval '60 ms', s.at + interval '1 s',
       interval '1 ms' * (20 + mod(s.n, 80)), interval '1 ms' * (40 + mod(s.n, 120)),
       CASE WHEN mod(s.n, 97) = 0 OR mod(s.n, 500) = 0 THEN 'HTTP 500 from target' ELSE '' END,
       0, s.at - interval '1 s'
  FROM (SELECT n, %(now)s::timestamptz - (%(span)s::interval * n / %(runs)s) AS at
          FROM generate_series(1, %(runs)s) AS n) s
  JOIN bench_jobs j ON j.rn = mod(s.n, %(jobs)s)
"""


def seed(runs: int, days: int, jobs: int) -> None:
    from django.db import connection

    from beat_engine.db_clock import read_database_clock
    from jobs.models import Job, Tenant
    from jobs.services.jobs import JobInput, job_create

    if Job.objects.count() >= jobs:
        print(f"seed: reusing {Job.objects.count()} jobs")
    else:
        now = read_database_clock()
        tenants = [
            Tenant.objects.get_or_create(name=f"bench-{i}", defaults={"created_at": now})[0]
            for i in range(4)
        ]
        for i in range(jobs):
            data = JobInput(
                name=f"bench-status-{i}", cron="* * * * *", target_kind="callable",
                target_name="demo.heartbeat",
            )  # fmt: skip
            job_create(tenant=tenants[i % 4], data=data, now=now)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_jobrun")
        have = cursor.fetchone()[0]
    if have >= runs:
        print(f"seed: reusing {have} runs")
        return
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE bench_jobs AS SELECT (row_number() OVER (ORDER BY id)) - 1 AS rn,"
            " id, tenant_id, partition FROM jobs_job"
        )
        cursor.execute(
            SEED_RUNS_SQL,
            {"now": read_database_clock(), "span": f"{days} days", "runs": runs, "jobs": jobs},
        )
        cursor.execute(
            """
            INSERT INTO jobs_runattempt (run_id, attempt, epoch, worker, queued_at, started_at,
                                         finished_at, outcome, error)
            SELECT r.id, a, 1, 'bench-worker', r.queued_at + (a - 1) * interval '10 s',
                   r.started_at + (a - 1) * interval '10 s',
                   r.finished_at + (a - 1) * interval '10 s',
                   CASE WHEN a = r.attempt AND r.state = 'succeeded' THEN 'succeeded'
                        ELSE 'failed' END, ''
              FROM jobs_jobrun r, generate_series(1, r.attempt) a
            """
        )
        cursor.execute(
            """
            INSERT INTO jobs_deadletter (run_id, job_id, tenant_id, attempts, last_error,
                                         moved_at, replay_count)
            SELECT id, job_id, tenant_id, attempt, last_error, finished_at, 0
              FROM jobs_jobrun WHERE state = 'dead'
            """
        )
        cursor.execute("ANALYZE")
    print(f"seed: {runs} runs over {days} days in {time.monotonic() - started:.1f} s")


def _median_ms(action: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def _plan(sql: str, params: list[Any]) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return [row[0] for row in cursor.fetchall()]


def statements(tenant_id: int | None, *, by_job: bool) -> None:
    from django.db import connection

    from beat_engine.db_clock import read_database_clock
    from jobs.status import overview_data as data
    from jobs.status import run_window

    # Force one form for every statement, whatever its window.
    run_window.by_job_is_cheaper = lambda **_: by_job  # type: ignore[assignment]

    window = data.Window.ending(read_database_clock())
    captured: list[tuple[str, list[Any]]] = []
    original = data._rows

    def capture(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        captured.append((sql, params))
        return original(sql, params)

    reads = {
        "firings and lag per minute": data.firings_and_lateness,
        "runs by state (1 h, 24 h)": data.runs_by_state,
        "retries per minute": data.retries_per_minute,
        "dead letters per minute": data.dead_letters_per_minute,
        "latest failures": data.latest_failures,
    }
    scope = "all tenants" if tenant_id is None else f"tenant {tenant_id}"
    scope += ", by job" if by_job else ", by scan"
    for name, read in reads.items():
        ms = _median_ms(lambda read=read: read(window, tenant_id=tenant_id))
        captured.clear()
        data._rows = capture  # type: ignore[assignment]
        try:
            read(window, tenant_id=tenant_id)
        finally:
            data._rows = original  # type: ignore[assignment]
        sql, params = captured[0]
        plan = _plan(sql, params)
        print(f"\n{name} ({scope}): median {ms:.1f} ms")
        # The root, then every node that reads a table or an index.
        for line in [plan[0], *(line for line in plan[1:] if "Scan" in line)]:
            print("    " + line.strip())
    connection.close()


def pages() -> None:
    from django.contrib.auth.models import User
    from django.test import Client

    from jobs.models import Job, JobRun, Tenant, TenantMember

    root, _ = User.objects.get_or_create(
        username="bench-root", defaults={"is_staff": True, "is_superuser": True}
    )
    staff, _ = User.objects.get_or_create(username="bench-staff", defaults={"is_staff": True})
    tenant = Tenant.objects.get(name="bench-0")
    TenantMember.objects.get_or_create(user=staff, defaults={"tenant": tenant})
    job = Job.objects.filter(tenant=tenant).first()
    run = JobRun.objects.filter(job=job).order_by("-scheduled_for").first()
    assert job is not None
    assert run is not None
    for label, user in (("superuser", root), ("tenant staff", staff)):
        client = Client()
        client.force_login(user)
        for url in ("/status/", f"/status/jobs/{job.pk}/", f"/status/runs/{run.pk}/"):
            status = client.get(url).status_code
            ms = _median_ms(lambda url=url, client=client: client.get(url))
            print(f"page {url} as {label}: HTTP {status}, median {ms:.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=2000)
    args = parser.parse_args()
    embedded = _setup(ROOT / ".local" / "bench_status")
    try:
        seed(args.runs, args.days, args.jobs)
        from beat_engine.db_clock import read_database_clock
        from jobs.models import Tenant
        from jobs.status import run_window

        cheaper = run_window.by_job_is_cheaper
        now = read_database_clock()
        for hours in (1, 24):
            form = "by job" if cheaper(since=now - timedelta(hours=hours), until=now) else "scan"
            print(f"the pages read a window of {hours} h {form} on this data")
        tenant_id = Tenant.objects.get(name="bench-0").pk
        for by_job in (True, False):
            statements(None, by_job=by_job)
            statements(tenant_id, by_job=by_job)
        run_window.by_job_is_cheaper = cheaper  # type: ignore[assignment]
        pages()
    finally:
        if embedded is not None:
            embedded.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
