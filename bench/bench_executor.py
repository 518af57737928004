"""Executor throughput: runs/s one worker process completes, and its overhead per run.

Run manually (not in CI):  .venv/bin/python bench/bench_executor.py [--runs 2000] [--quick]
    [--target noop|http] [--delay-ms 20] [--pool prefork] [--concurrency 1]
Uses DATABASE_URL/REDIS_URL when both are set, else starts embedded servers in .local/bench.
Prints the figures and rewrites the "## Execution" section of docs/benchmarks.md (not with
--quick, which only prints, for before/after pairs while changing the executor).

With ``--target http`` the work is a POST to a local target (bench/compare/http_target.py,
127.0.0.1) that answers after ``--delay-ms``: an HTTP-target job's runs against a bare Celery
task making the same call (bench/plain_http.py), as in the side-by-side end-to-end scenario.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.docs_section import replace_section  # noqa: E402

# What the runs' work is: the registered no-op callable, or a POST to the local target.
NOOP, HTTP = "noop", "http"


def _services(directory: str = "bench") -> Any:
    """None when DATABASE_URL and REDIS_URL are both set; else embedded servers, started in
    .local/``directory`` (stop them at the end)."""
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return None
    from scheduler_project.embedded import EmbeddedServices

    services = EmbeddedServices(ROOT / ".local" / directory)
    os.environ.update(services.start())
    return services


def _worker(
    env: dict[str, str], log: Path, pool: str = "prefork", concurrency: int = 1
) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "scheduler_project",
            "worker",
            "--pool",
            pool,
            "--concurrency",
            str(concurrency),
            "-Q",
            "bench",
            "--loglevel",
            "WARNING",
            "--without-mingle",
            "--without-gossip",
            "--without-heartbeat",
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return proc


def _wait(predicate: Any, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit("bench timed out")
        time.sleep(0.01)


def noop_job(tenant: Any, name: str, now: datetime) -> Any:
    """A job of ``tenant`` that calls the no-op callable on the bench queue, every minute (whole
    minutes: none of queued_runs' firings is one of its own)."""
    from jobs.services.jobs import JobInput, job_create

    return job_create(
        tenant=tenant,
        data=JobInput(
            name=name,
            target_kind="callable",
            target_name="bench.noop",
            cron="* * * * *",
            queue="bench",
        ),
        now=now,
    )


def http_job(tenant: Any, name: str, url: str, now: datetime, firing: str = "executor") -> Any:
    """As ``noop_job``, an HTTP-target job POSTing ``{"firing": firing}`` to ``url``."""
    from jobs.services.jobs import JobInput, job_create

    return job_create(
        tenant=tenant,
        data=JobInput(
            name=name,
            target_kind="http",
            target_url=url,
            cron="* * * * *",
            queue="bench",
            payload={"firing": firing},
        ),
        now=now,
    )


def queued_runs(job: Any, runs: int, now: datetime) -> list[Any]:
    """``runs`` queued runs of ``job`` at attempt 1, inserted, one microsecond apart from half a
    minute past a minute ten minutes ago (no firing of the job's own schedule, on whole minutes,
    among them): in a day partition, where a deployment's runs are. Until 2026-12-07 they were
    in 2030, so in the default partition, whose partition check (evaluated by every update)
    is the negation of every day's bounds."""
    from django.db import connection

    from jobs.models import JobRun
    from jobs.services.dedup import dedup_key_for
    from jobs.states import RunState

    base = now.replace(second=30, microsecond=0) - timedelta(minutes=10)
    rows = [
        JobRun(
            job=job,
            tenant=job.tenant,
            partition=job.partition,
            scheduled_for=at,
            state=RunState.QUEUED,
            attempt=1,
            queued_at=now,
            dedup_key=dedup_key_for(job.id, at),
            created_at=now,
        )
        for at in (base + timedelta(microseconds=i) for i in range(runs))
    ]
    JobRun.objects.bulk_create(rows, batch_size=1000)
    # Fresh statistics, as autovacuum would give a table that grew by this much: without
    # them the planner may take the start's lookups for a table of a few rows and scan it.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE jobs_jobrun")
    return rows


def _hot_window_partitions() -> int:
    """The day partitions a deployment holds (the hot window, SCHEDULER_HISTORY_HOT_DAYS, and
    the days ahead), so the worker's statements are planned against as many as in production;
    the number of day partitions of the runs table after."""
    from django.conf import settings

    from jobs.run_partitions import RUN_TABLE
    from jobs.services.history_partitions import partition_days, partitions_ensure

    today = datetime.now(UTC).date()
    hot, ahead = settings.SCHEDULER["HISTORY_HOT_DAYS"], settings.SCHEDULER["PARTITIONS_AHEAD_DAYS"]
    partitions_ensure(today + timedelta(days=n) for n in range(-hot, ahead + 1))
    return len(partition_days(RUN_TABLE))


def _bench_executor(runs: int, running_limit: int | None = None, url: str | None = None) -> float:
    """Seconds from the first publish to the last success of ``runs`` runs of a new job
    (no-op, or POSTs to ``url``), queued before the clock starts."""
    from jobs.models import JobRun, Tenant
    from jobs.states import RunState
    from scheduler_project.celery import app

    now = datetime.now(UTC)
    tenant, _ = Tenant.objects.get_or_create(name="bench", defaults={"created_at": now})
    # A running limit far above the one worker process: every start takes the limited path
    # (the tenant's lock and the count, jobs/services/running_limits.py), none waits.
    Tenant.objects.filter(id=tenant.id).update(max_running_runs=running_limit)
    name = f"bench-{now.timestamp()}"
    job = noop_job(tenant, name, now) if url is None else http_job(tenant, name, url, now)
    rows = queued_runs(job, runs, now)
    ids = [str(r.id) for r in rows]
    started = time.monotonic()
    with app.producer_or_acquire() as producer:
        for run_id in ids:
            app.send_task("jobs.execute_run", args=[run_id, 1], queue="bench", producer=producer)
    # The last run sent is looked up by id (one index probe, as cheap as the bare task's Redis
    # GET) until it succeeds, and only then are all counted: a count every 10 ms would itself
    # load the PostgreSQL the worker is measured against.
    last = JobRun.objects.filter(id=rows[-1].id, state=RunState.SUCCEEDED)
    _wait(last.exists)
    _wait(lambda: JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count() == runs)
    return time.monotonic() - started


def _bench_bare(runs: int, http: bool = False) -> float:
    from bench.bench_tasks import BARE_DONE_KEY
    from jobs.notify import redis_client
    from scheduler_project.celery import app

    redis_client().delete(BARE_DONE_KEY)
    task, args = ("bench.bare_http", ["executor"]) if http else ("bench.bare_noop", [])
    started = time.monotonic()
    with app.producer_or_acquire() as producer:
        for _ in range(runs):
            app.send_task(task, args=args, queue="bench", producer=producer)
    _wait(lambda: int(redis_client().get(BARE_DONE_KEY) or 0) == runs)
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=None, help="default 2000, 500 with --quick")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="500 runs, no synchronous_commit=off pass, prints the figures and writes no docs",
    )
    parser.add_argument(
        "--running-limit",
        type=int,
        default=None,
        help="the bench tenant's max_running_runs (default none): the cost of the limited start",
    )
    parser.add_argument(
        "--pool",
        choices=("prefork", "threads", "gevent"),
        default="prefork",
        help="the worker's pool (default prefork); other pools only print (with --quick)",
    )
    parser.add_argument(
        "--concurrency", type=int, default=1, help="the worker's concurrency (default 1)"
    )
    parser.add_argument(
        "--target",
        choices=(NOOP, HTTP),
        default=NOOP,
        help="the runs' work: the no-op (default) or a POST to a local target (with --quick)",
    )
    parser.add_argument(
        "--delay-ms", type=int, default=20, help="with --target http, the target's delay (20)"
    )
    args = parser.parse_args()
    if (args.pool, args.concurrency, args.target) != ("prefork", 1, NOOP) and not args.quick:
        parser.error("--pool, --concurrency and --target other than prefork 1 noop need --quick")
    if args.delay_ms < 0:
        parser.error("--delay-ms must be at least 0")
    args.runs = args.runs or (500 if args.quick else 2000)
    services = _services()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    os.environ["SCHEDULER_CLIENT_MODULES"] = "scheduler_project.demo,bench.bench_tasks"
    os.environ["PYTHONPATH"] = str(ROOT)
    os.environ["LOG_LEVEL"] = "WARNING"
    target = None
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        partitions = _hot_window_partitions()
        log = ROOT / ".local" / "bench-worker.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        url = None
        env = dict(os.environ)
        if args.target == HTTP:
            from bench.bench_pools import _target

            target, port = _target(args.delay_ms, ROOT / ".local" / "bench-executor-ledger.jsonl")
            url = f"http://127.0.0.1:{port}/"
            env.update(SCHEDULER_HTTP_ALLOWLIST=f"127.0.0.1:{port}", BENCH_TARGET_URL=url)
            # This process validates the job's URL too, with the settings loaded already.
            settings.SCHEDULER["HTTP_ALLOWLIST"] = [f"127.0.0.1:{port}"]
        worker = _worker(env, log, args.pool, args.concurrency)
        try:
            # Warm-up: the worker is up and its children have imported everything.
            _bench_bare(50, http=url is not None)
            _bench_executor(50, args.running_limit, url)
            bare_s = _bench_bare(args.runs, http=url is not None)
            exec_s = _bench_executor(args.runs, args.running_limit, url)
        finally:
            os.killpg(worker.pid, 15)
            worker.wait()
        async_s = 0.0
        if not args.quick:
            # Same run with commits not waiting for the WAL flush, to show what fsync costs here.
            worker = _worker({**env, "PGOPTIONS": "-c synchronous_commit=off"}, log)
            try:
                _bench_executor(50)
                async_s = _bench_executor(args.runs)
            finally:
                os.killpg(worker.pid, 15)
                worker.wait()
    finally:
        if target is not None:
            os.killpg(target.pid, 15)
            target.wait()
        if services is not None:
            services.stop()
    bare_ms, exec_ms = bare_s / args.runs * 1000, exec_s / args.runs * 1000
    if args.quick:
        work = "no-op" if url is None else f"POST, target {args.delay_ms} ms"
        print(
            f"{args.pool} x {args.concurrency}, {work}: executor {args.runs / exec_s:,.0f} runs/s "
            f"({exec_ms:.2f} ms/run), bare task {args.runs / bare_s:,.0f} runs/s "
            f"({bare_ms:.2f} ms/run), overhead {exec_ms - bare_ms:.2f} ms/run, ratio "
            f"{exec_ms / bare_ms:.2f}"
        )
        return 0
    section = (
        "## Execution\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python bench/bench_executor.py "
        f"--runs {args.runs}`: one prefork worker process (concurrency 1, prefetch 1, late acks), "
        "embedded PostgreSQL and Redis on Unix sockets, 2 shared cores; the runs table with "
        f"{partitions} day partitions (the hot window and the days ahead, as a deployment "
        "holds them) and its default one; the bench's runs in the day partition of ten minutes ago "
        "(before 2026-12-07 in the default partition, see below); all messages published "
        "before timing ends, time = first publish to last completion.\n\n"
        "| what | runs/s | ms per run |\n| --- | ---: | ---: |\n"
        f"| executor (`jobs.execute_run`, no-op callable) | {args.runs / exec_s:,.0f} | "
        f"{exec_ms:.2f} |\n"
        f"| bare Celery task, same no-op (+1 Redis INCR to see it finish) | "
        f"{args.runs / bare_s:,.0f} | {bare_ms:.2f} |\n"
        f"| executor overhead per run | | {exec_ms - bare_ms:.2f} |\n"
        f"| executor, worker sessions with synchronous_commit=off | {args.runs / async_s:,.0f} | "
        f"{async_s / args.runs * 1000:.2f} |\n\n"
        "The overhead is the scheduler's bookkeeping, two SQL statements per run, each its own "
        "commit (one WAL flush): the start (CAS queued -> running, the attempt row and the "
        "job's fields, in one statement) and the outcome (CAS, attempt row closed, dedup key "
        "recorded, in one statement), both prepared on the worker's connection "
        '(docs/execution.md, "Database connections in the worker"); plus the hand-off to a '
        "reused target thread and the run's metrics, kept in the process by prometheus_client "
        "(no round trip). The worker keeps its database connection across tasks "
        "(`CELERY_DB_REUSE_MAX`) and sends no health probe before the start (a lost connection "
        "fails the start, which is repeated on a new one); the last row shows how much of the "
        "rest is the WAL flush on this disk.\n\n"
        "History (2026-11-30, this bench, two alternating before/after pairs in one session on "
        "a busy 2-core host): before the one-statement start and outcome, the reused target "
        "thread and the kept connection, the executor did 43-64 runs/s with 14.0-20.9 ms of "
        "overhead per run (10.4-10.7x a bare task: a new PostgreSQL connection per task and "
        "~14 statements in two transactions); after, 167-197 runs/s with 3.7-4.0 ms "
        "(3.0-3.8x). 2026-12-01, two alternating pairs against the code before cancel "
        "announcements, outcome-write retries, policy checks and database-clock leases: "
        "overhead 7.55 and 4.92 ms before, 6.74 and 4.60 ms after (no measurable change; the "
        "spread between pairs is the shared host). 2026-12-03, --quick, two alternating pairs "
        "with 63 day partitions and the default one: before the prepared start and outcome "
        "and the attempts pruned to the run's partition, 8.95 and 10.19 ms per run (overhead "
        "7.74 and 8.78 ms); after, "
        "5.74 and 6.50 ms (4.53 and 5.16 ms); the bare task 1.21-1.40 ms. 2026-12-07, "
        "--quick --runs 1000, three alternating pairs each, on a host about twice as slow as "
        "on 2026-12-04 for every benchmark: without the health probe before the start, 12.16, "
        "14.18 and 11.83 ms per run before and 12.45, 12.03 and 11.48 ms after (within the "
        "noise); with the prepared statements' generic plans as well (docs/execution.md, "
        '"Database connections in the worker"), 12.89, 12.80 and 14.50 ms before and 10.56, '
        "12.08 and 10.68 ms after (overhead 10.45-11.44 ms before, 7.92-9.30 ms after); the "
        "bare task 2.01-3.06 ms. The table above is from that slower host: its ratio to the "
        "bare task is higher than on 2026-12-03 although each run costs less than before on "
        "the same host. Later on 2026-12-07 the bench's runs moved from 2030 (the default "
        "partition, whose partition check every update of a run evaluates: the negation of "
        "every day's bounds) to a day partition, where a deployment's runs are; with it, "
        "three alternating --quick --runs 1000 pairs before and after cheaper writes of a run "
        '(docs/execution.md, "What each write of a run costs PostgreSQL") gave 13.58, 12.95 '
        "and 10.53 ms per run before and 12.74, 17.26 and 11.72 ms after, the bare task "
        "2.62-4.80 ms: no difference this host's noise lets through. 2026-12-08, --quick "
        "--runs 2000, three alternating pairs before and after the start and the outcome "
        "named the run's own day partitions (docs/execution.md, \"What each write of a run "
        'costs PostgreSQL"): 4.96, 4.90 and 4.43 ms per run before, 4.57, 4.27 and 4.46 ms '
        "after, the bare task 1.57-1.72 ms; with --target http --concurrency 8 (each run a POST "
        "to a local target answering after 20 ms, against a bare task making the same call), "
        "two pairs: 5.69 and 5.45 ms per run before, 5.51 and 4.98 ms after, the bare task "
        "3.52-3.59 ms (ratios 1.59 and 1.55 before, 1.54 and 1.41 after).\n\n"
        "Why one process at concurrency 1 stays near 3x a bare task: the bare task's 1.6 ms is "
        "Celery's own work per message (the parent's pop and ack, the hand-off to the pool "
        "child); the executor adds two round trips that each end in a commit, and a commit "
        "waits for its WAL flush (fdatasync on this virtual disk: 20% of the worker backend's "
        "CPU samples under perf on 2026-12-08). With one run in flight each of those waits "
        "adds to the run's time; with eight processes they overlap other runs' work and "
        "PostgreSQL may flush several sessions' commits at once, and a 20 ms target is the "
        "same for both: the ratio was about 1.5 there (which of these counts most was not "
        "measured).\n"
    )
    print(section)
    replace_section("Execution", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
