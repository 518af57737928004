"""Run-history archive: how fast days of runs are exported, verified and dropped, and restored.

    .venv/bin/python bench/bench_archive.py [--days 2] [--runs-per-day 1000000] [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/bench_archive (never DATABASE_URL's
database), migrates, and fills ``--days`` day partitions 40 days back with ``--runs-per-day``
finished runs each (one attempt per run, spread over ``--jobs`` jobs, generated in SQL with the
run ids' SQL twin), then ``VACUUM ANALYZE``. It runs the archive pass
(jobs/services/run_archive.py, as ``manage.py archive_runs`` does) and reports each step's time
per day: the detach (the one step that locks the runs table exclusively), the export (COPY out,
gzip, files synced), the verify (files re-read, digests in PostgreSQL) and the drop; archive
throughput is rows (runs + attempts) over export + verify. Then it restores one day
(``restore_runs``) and reports its time. With ``--write-docs`` it rewrites the "Run history
archive" section of docs/benchmarks.md and its records in docs/benchmarks.json. The services
directory (and the archive in it) is deleted at the end unless ``--keep``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import embedded_django  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

SERVICES = ROOT / ".local" / "bench_archive"
TITLE = "Run history archive"


def _setup() -> Any:
    return embedded_django.start(
        SERVICES / "services", SCHEDULER_ARCHIVE_DIR=str(SERVICES / "archive")
    )


_sql = embedded_django.sql


def _jobs(count: int, now: datetime) -> tuple[int, list[Any]]:
    from jobs.models import Job
    from jobs.services.jobs import JobInput, job_create
    from jobs.services.tenants import tenant_create

    tenant = tenant_create(name=f"archive-{now:%H%M%S}", now=now)
    ids = []
    for n in range(count):
        job = job_create(
            tenant=tenant,
            data=JobInput(name=f"job-{n}", target_kind="callable", target_name="demo.heartbeat",
                          cron="* * * * *"),
            now=now,
        )  # fmt: skip
        ids.append(job.id)
    Job.objects.filter(tenant=tenant).update(status="paused")
    return tenant.id, ids


def fill(day: date, runs: int, tenant_id: int, jobs: list[Any]) -> float:
    """``runs`` finished runs on ``day`` with an attempt each; seconds taken."""
    from jobs.run_partitions import RUN_TABLE, partition_name
    from jobs.services.history_partitions import partitions_ensure

    partitions_ensure([day])
    started = time.perf_counter()
    per_job = runs // len(jobs)
    spacing_ms = 86_400_000 // (per_job + 1)
    for job in jobs:
        _sql(
            """
            INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger,
                                     state, attempt, epoch, dedup_key, worker, cancel_requested,
                                     held_by, last_error, replayed_count, created_at, queued_at,
                                     published_at, started_at, heartbeat_at, finished_at,
                                     lateness, start_lag, result, upstream_run_ids)
            SELECT jobs_run_id(t), %(job)s, %(tenant)s, 7, t, 'schedule', 'succeeded', 1, 12,
                   md5(%(job)s::text || t::text), 'worker-1@host-a', false, '', '', 0,
                   t, t, t, t + interval '40 ms', t + interval '70 ms', t + interval '90 ms',
                   interval '12 ms', interval '41 ms', '{"ok": true, "rows": 17}'::jsonb,
                   ARRAY[]::uuid[]
              FROM generate_series(1, %(runs)s) AS g,
                   LATERAL (SELECT (%(day)s::date::timestamp AT TIME ZONE 'UTC')
                                   + g * %(spacing)s * interval '1 ms' AS t) AS x
            """,
            {"job": job, "tenant": tenant_id, "runs": per_job, "day": day, "spacing": spacing_ms},
        )
    _sql(
        f"""
        INSERT INTO jobs_runattempt (run_id, attempt, epoch, worker, queued_at, started_at,
                                     finished_at, outcome, error)
        SELECT id, 1, 12, worker, queued_at, started_at, finished_at, 'succeeded', ''
          FROM {partition_name(RUN_TABLE, day)}
        """
    )
    return time.perf_counter() - started


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from beat_engine.db_clock import read_database_clock
    from jobs.run_partitions import RUN_TABLE, partition_name
    from jobs.services.run_archive import archive_days, archive_root, hot_cutoff
    from jobs.services.run_restore import restore_day

    now = read_database_clock()
    tenant_id, jobs = _jobs(args.jobs, now)
    days = [(now - timedelta(days=40 + n)).date() for n in range(args.days)]
    fill_s = [fill(day, args.runs_per_day, tenant_id, jobs) for day in days]
    started = time.perf_counter()
    _sql("VACUUM ANALYZE jobs_jobrun")
    _sql("VACUUM ANALYZE jobs_runattempt")
    vacuum_s = time.perf_counter() - started
    sizes = _sql(
        "SELECT pg_total_relation_size(%s) + pg_total_relation_size(%s)",
        [partition_name(RUN_TABLE, days[0]), partition_name("jobs_runattempt", days[0])],
    )[0][0]
    print(f"filled {args.days} day(s) in {sum(fill_s):.0f} s, VACUUM ANALYZE {vacuum_s:.0f} s")
    started = time.perf_counter()
    report = archive_days(before=hot_cutoff(now), clock=read_database_clock)
    pass_s = time.perf_counter() - started
    outcomes = report.by("archived")
    for outcome in outcomes:
        print(f"{outcome.day}: {outcome.runs:,} runs, {outcome.attempts:,} attempts, "
              + ", ".join(f"{k} {v:.2f} s" for k, v in outcome.seconds.items()))  # fmt: skip
    directory = archive_root() / "runs"
    files = list(directory.rglob("*.jsonl.gz"))
    archive_bytes = sum(p.stat().st_size for p in files)
    restore_dir = next(p.parent for p in files if p.parent.name == days[0].isoformat())
    started = time.perf_counter()
    restore_day(restore_dir)
    restore_s = time.perf_counter() - started
    print(f"restored {days[0]} in {restore_s:.1f} s")
    return {
        "days": outcomes,
        "pass_s": pass_s,
        "fill_s": sum(fill_s),
        "vacuum_s": vacuum_s,
        "day_table_mb": sizes / 2**20,
        "archive_mb": archive_bytes / 2**20,
        "restore_s": restore_s,
    }


def _rate(outcome: Any) -> float:
    seconds = outcome.seconds.get("export", 0) + outcome.seconds.get("verify", 0)
    return (outcome.runs + outcome.attempts) / seconds if seconds else 0.0


def _section(args: argparse.Namespace, found: dict[str, Any], load: tuple[float, float],
             when: str) -> str:  # fmt: skip
    command = "bench/bench_archive.py " + " ".join(sys.argv[1:])
    days = found["days"]
    rows_per_day = days[0].runs + days[0].attempts if days else 0
    lines = [
        f"## {TITLE}",
        "",
        f"`.venv/bin/python {command}` on {when}, this 2-core machine "
        f"shared with other work (1-minute load average {load[0]:.1f} at the start, "
        f"{load[1]:.1f} at the end); embedded PostgreSQL of its own, the archive on the same "
        f"disk. {args.days} day partition(s) of **{args.runs_per_day:,} finished runs** each, "
        f"one attempt per run, over {args.jobs} jobs (generated in SQL in "
        f"{found['fill_s']:.0f} s, `VACUUM ANALYZE` {found['vacuum_s']:.0f} s); one day's run "
        f"and attempt partitions with their indexes: {found['day_table_mb']:,.0f} MB, its "
        f"archive files {found['archive_mb'] / max(len(days), 1):,.0f} MB. The pass is "
        "`jobs/services/run_archive.py`, as `manage.py archive_runs` runs it (docs/history.md, "
        '"Archive").',
        "",
        "| day | runs + attempts | detach | export | verify | drop | archive rows/s |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for d in days:
        s = d.seconds
        lines.append(
            f"| {d.day} | {d.runs + d.attempts:,} | {s.get('detach', 0) * 1000:,.0f} ms "
            f"| {s.get('export', 0):.1f} s | {s.get('verify', 0):.1f} s "
            f"| {s.get('drop', 0) * 1000:,.0f} ms | {_rate(d):,.0f} |"
        )
    rates = [_rate(d) for d in days]
    drop_ms = statistics.median(d.seconds.get("drop", 0) for d in days) * 1000
    detach_ms = statistics.median(d.seconds.get("detach", 0) for d in days) * 1000
    restore_rate = rows_per_day / found["restore_s"] if found["restore_s"] else 0.0
    lines += [
        "",
        f"- archive throughput: **{statistics.median(rates):,.0f} rows/s** (median over the "
        "days; rows of runs and attempts over export + verify, the steps that read every row);",
        f"- time to drop a day: **{drop_ms:,.0f} ms** "
        "(median; `DROP TABLE` of the detached partitions, under the layout lock); the detach, "
        f"the only step that holds the runs table's exclusive lock, took "
        f"{detach_ms:,.0f} ms (median);",
        f"- restore of one day ({rows_per_day:,} rows) into `history_audit`: "
        f"{found['restore_s']:.1f} s ({restore_rate:,.0f} rows/s), "
        "verification of the files included.",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def _records(args: argparse.Namespace, found: dict[str, Any]) -> list[dict[str, Any]]:
    base = {"source": "bench-archive", "runs_per_day": args.runs_per_day}
    days = found["days"]
    return [
        {**base, "metric": "archive_rows_per_s",
         "value": statistics.median(_rate(d) for d in days), "unit": "rows/s"},
        {**base, "metric": "drop_day",
         "value": statistics.median(d.seconds.get("drop", 0) for d in days) * 1000, "unit": "ms"},
        {**base, "metric": "detach_day",
         "value": statistics.median(d.seconds.get("detach", 0) for d in days) * 1000, "unit": "ms"},
        {**base, "metric": "restore_day", "value": found["restore_s"], "unit": "s"},
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--runs-per-day", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep .local/bench_archive")
    args = parser.parse_args()
    shutil.rmtree(SERVICES, ignore_errors=True)
    embedded = _setup()
    try:
        load_at_start = os.getloadavg()[0]
        found = measure(args)
        load = (load_at_start, os.getloadavg()[0])
        days = found["days"]
        print(f"archive: {statistics.median(_rate(d) for d in days):,.0f} rows/s; drop "
              f"{statistics.median(d.seconds.get('drop', 0) for d in days) * 1000:,.0f} ms; "
              f"load {load[0]:.1f} -> {load[1]:.1f}")  # fmt: skip
        if args.write_docs and days:
            when = datetime.now(UTC).date().isoformat()
            replace_section(TITLE, _section(args, found, load, when))
            replace_records("bench-archive", _records(args, found))
    finally:
        embedded.stop()
        if not args.keep:
            shutil.rmtree(SERVICES, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
