"""Run history at scale: the readers and the history purge on a large runs table.

    .venv/bin/python bench/bench_history.py [--runs 2000000] [--jobs 1000] [--write-docs]
                                            [--claims [--claims-repeat 5] [--spike 50000]
                                             [--steady-rate 1000]]

Starts its own embedded PostgreSQL and Redis in .local/bench_history (never DATABASE_URL's
database), generates ``--runs`` finished runs with COPY (one job holds ``--big-share`` of them,
the others share the rest, one firing a minute back from now), and ``--keys`` expired dedup
keys, ``--letters`` closed dead letters and ``--results`` old stored results for the purge.
Then it measures, through Django's test client (in process, no HTTP server):

* ``GET /v1/jobs/{id}`` of the big job and ``GET /v1/jobs/{id}/runs?limit=20`` (first page and
  a page 200 deep), p50/p95 over ``--repeat`` requests;
* the admin's run list (superuser, first page), median of ``--admin-repeat`` requests;
* what the same readers cost the old way, as bare statements: a full ``count(*)``, the
  GROUP BY over all of a job's runs, the date hierarchy's ``SELECT DISTINCT date_trunc``;
* the purge's throughput (rows/s) per table, batch after batch until nothing is left;

and prints the EXPLAIN (ANALYZE, BUFFERS) plans of the readers. With ``--claims`` it also runs
the beat engine's midnight spike and steady rate (bench/bench_engine.py) in the same process on
an empty history and beside the generated one, interleaved: right after the migrations a second
database is copied from the migrated one (``CREATE DATABASE <name>_empty TEMPLATE <name>``),
which keeps an empty history; after the history is generated and the readers measured,
``--claims-repeat`` rounds each run the spike and the steady rate once on each database, the
side going first alternating (E F, F E, ...), switched by pointing Django's shared connection
settings at the other database (the history's jobs paused on it so that only the measured jobs
fire). It prints each round's ratio (with the history / empty) of the spike's "all published
within" and the p99 lateness, and their medians. With ``--write-docs`` it
rewrites the "Run history" section of docs/benchmarks.md and its records in
docs/benchmarks.json. The services directory is deleted at the end (the data is dropped)
unless ``--keep``. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import embedded_django  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402
from jobs.run_ids import run_id_floor, run_id_for  # noqa: E402

SERVICES = ROOT / ".local" / "bench_history"
RUN_COLUMNS = (
    "id, job_id, tenant_id, partition, scheduled_for, trigger, state, attempt, epoch, "
    "dedup_key, worker, cancel_requested, last_error, replayed_count, queued_at, started_at, "
    "finished_at, created_at"
)
# Finished states in these shares (of 100): what a month of a healthy system holds.
STATES = ["succeeded"] * 90 + ["failed"] * 4 + ["skipped"] * 3 + ["dead"] * 2 + ["cancelled"]


def _setup() -> Any:
    # Throttling off: the bench's requests would exceed a tenant's default budget. No worker
    # drains the queue in --claims: the fixed broker bound, as bench/bench_engine.py runs it,
    # not one sized from a drain rate of zero (which holds every claimed run back).
    return embedded_django.start(
        SERVICES, SCHEDULER_API_RATE="", SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S="0"
    )


_sql = embedded_django.sql


def _timed_sql(statement: str, params: Any = None) -> float:
    started = time.perf_counter()
    _sql(statement, params)
    return (time.perf_counter() - started) * 1000


def _copy(table: str, columns: str, lines: Iterator[str]) -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        raw = cursor.cursor  # psycopg's own cursor: COPY FROM STDIN
        with raw.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
            for chunk in lines:
                copy.write(chunk)


def _jobs(count: int, now: datetime, label: str) -> tuple[Any, list[tuple[uuid.UUID, int]]]:
    """A tenant, an API key and ``count`` jobs (copies of one created through the service)."""
    from jobs.models import Job
    from jobs.services.jobs import JobInput, job_create
    from jobs.services.tenants import api_key_create, tenant_create

    tenant = tenant_create(name=f"history-{label}-{now:%H%M%S}", now=now)
    _, key = api_key_create(tenant=tenant, name="bench", now=now)
    base = job_create(
        tenant=tenant,
        data=JobInput(name="big", target_kind="callable", target_name="demo.heartbeat",
                      cron="* * * * *"),
        now=now,
    )  # fmt: skip
    columns = [str(f.column) for f in Job._meta.concrete_fields]
    copied = ", ".join(
        {
            "id": "gen_random_uuid()",
            "name": "'job-' || g",
            "partition": "g %% 64",
        }.get(c, c)
        for c in columns
    )
    _sql(
        f"INSERT INTO jobs_job ({', '.join(columns)}) SELECT {copied} FROM jobs_job, "
        "generate_series(1, %s) AS g WHERE id = %s",
        [count - 1, base.id],
    )
    others = _sql(
        "SELECT id, partition FROM jobs_job WHERE tenant_id = %s AND id <> %s",
        [tenant.id, base.id],
    )
    jobs = [(base.id, base.partition)] + [(row[0], row[1]) for row in others]
    return (tenant, key), jobs


def _run_lines(
    jobs: list[tuple[uuid.UUID, int]], tenant_id: int, total: int, big_share: float, now: datetime,
    keep_ids: int, kept: list[uuid.UUID],
) -> Iterator[str]:  # fmt: skip
    """COPY text for ``total`` runs, 100,000 rows a chunk; the first ``keep_ids`` succeeded
    runs' ids go to ``kept`` (the purge's keys and dead letters point at them)."""
    big = int(total * big_share)
    rest = total - big
    per_job = max(1, rest // max(1, len(jobs) - 1))
    plan = [(jobs[0], big)] + [(job, per_job) for job in jobs[1:]]
    plan[-1] = (plan[-1][0], plan[-1][1] + rest - per_job * (len(jobs) - 1))
    rows: list[str] = []
    n = 0
    for (job_id, partition), count in plan:
        for i in range(count):
            at = now - timedelta(minutes=i + 1)
            state = STATES[n % len(STATES)]
            run_id = run_id_for(at)
            if state == "succeeded" and len(kept) < keep_ids:
                kept.append(run_id)
            stamp = at.isoformat()
            rows.append(
                f"{run_id}\t{job_id}\t{tenant_id}\t{partition}\t{stamp}\tschedule\t{state}\t1\t1\t"
                f"{n:064x}\t\tf\t\t0\t{stamp}\t{stamp}\t{stamp}\t{stamp}\n"
            )
            n += 1
            if len(rows) == 100_000:
                yield "".join(rows)
                rows = []
    if rows:
        yield "".join(rows)


def _on_every_partition(definition: str) -> str:
    """pg_get_indexdef of a partitioned table's index says ``ON ONLY``, which would build the
    parent's index alone (invalid, no partition's): the bench rebuilds it on every partition."""
    return definition.replace(" ON ONLY ", " ON ", 1)


def generate(args: argparse.Namespace, now: datetime) -> dict[str, Any]:
    (tenant, key), jobs = _jobs(args.jobs, now, label=str(args.runs))
    kept: list[uuid.UUID] = []
    # A bulk load's usual order: the secondary indexes are dropped, the rows copied (the
    # primary and unique keys still checked), and the indexes built again once, sorted.
    secondary = _sql(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'jobs_jobrun' AND "
        "indexname NOT IN (SELECT conname FROM pg_constraint "
        "                   WHERE conrelid = 'jobs_jobrun'::regclass)"
    )
    # The day partitions of the generated history (docs/history.md, "Partitions"): those of
    # the last --partition-days days, a hot window's worth; older firings (the big job's reach
    # furthest back) go to the default partition, where an archive would have taken them.
    from jobs.run_partitions import days_between
    from jobs.services.history_partitions import partitions_ensure

    oldest = now - timedelta(minutes=int(args.runs * args.big_share) + 1)
    oldest = max(oldest, now - timedelta(days=args.partition_days))
    partitions_ensure(days_between(oldest.date(), now.date()))
    started = time.perf_counter()
    for name, _ in secondary:
        _sql(f"DROP INDEX {name}")
    _copy(
        "jobs_jobrun", RUN_COLUMNS,
        _run_lines(jobs, tenant.id, args.runs, args.big_share, now, args.keys + args.letters, kept),
    )  # fmt: skip
    copy_s = time.perf_counter() - started
    started = time.perf_counter()
    for _, definition in secondary:
        _sql(_on_every_partition(definition))
    index_s = time.perf_counter() - started
    started = time.perf_counter()
    _sql("VACUUM (ANALYZE) jobs_jobrun")
    vacuum_s = time.perf_counter() - started
    expired = now - timedelta(days=1)
    old = now - timedelta(days=40)
    key_runs, letter_runs = kept[: args.keys], kept[args.keys :]
    _copy(
        "jobs_dedupkey", "key, tenant_id, job_id, run_id, outcome, created_at, expires_at",
        iter([
            "".join(f"k{i:063x}\t{tenant.id}\t{jobs[0][0]}\t{run_id}\tsucceeded\t"
                    f"{(expired - timedelta(days=7)).isoformat()}\t{expired.isoformat()}\n"
                    for i, run_id in enumerate(key_runs[j : j + 100_000], start=j))
            for j in range(0, len(key_runs), 100_000)
        ]),
    )  # fmt: skip
    _copy(
        "jobs_deadletter",
        "run_id, job_id, tenant_id, attempts, last_error, moved_at, replayed_at, replay_count",
        iter([
            "".join(f"{run_id}\t{jobs[0][0]}\t{tenant.id}\t3\tboom\t{old.isoformat()}\t"
                    f"{old.isoformat()}\t1\n" for run_id in letter_runs)
        ]),
    )  # fmt: skip
    _copy(
        "django_celery_results_taskresult",
        "task_id, status, content_type, content_encoding, result, date_created, date_done, "
        "traceback, meta, periodic_task_name, task_name, task_args, task_kwargs, worker",
        iter([
            "".join(f"r{i}:1\tSUCCESS\tapplication/json\tutf-8\tnull\t{old.isoformat()}\t"
                    f"{old.isoformat()}\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\t\\N\n"
                    for i in range(j, min(j + 100_000, args.results)))
            for j in range(0, args.results, 100_000)
        ]),
    )  # fmt: skip
    _sql("VACUUM (ANALYZE) jobs_dedupkey, jobs_deadletter, django_celery_results_taskresult")
    return {
        "tenant": tenant,
        "key": key,
        "big_job": jobs[0][0],
        "copy_s": copy_s,
        "index_s": index_s,
        "vacuum_s": vacuum_s,
        "table_mb": _sql(
            "SELECT sum(pg_total_relation_size(relid))::bigint / 1048576"
            " FROM pg_partition_tree('jobs_jobrun')"
        )[0][0],
    }


def _reset_keeping_history() -> int:
    """bench_engine's reset, minus the history: only the engine bench's own tenant's jobs and
    runs go (it truncates every run otherwise)."""
    import redis
    from django.conf import settings

    from jobs.models import Tenant

    tenant, _ = Tenant.objects.get_or_create(
        name="bench", defaults={"created_at": datetime.now(UTC)}
    )
    _sql(
        "DELETE FROM jobs_runattempt WHERE run_id IN"
        " (SELECT id FROM jobs_jobrun WHERE tenant_id = %s)",
        [tenant.id],
    )
    _sql("DELETE FROM jobs_dedupkey WHERE tenant_id = %s", [tenant.id])
    _sql("DELETE FROM jobs_deadletter WHERE tenant_id = %s", [tenant.id])
    _sql("DELETE FROM jobs_jobrun WHERE tenant_id = %s", [tenant.id])
    _sql("DELETE FROM jobs_job WHERE tenant_id = %s", [tenant.id])
    _sql("TRUNCATE jobs_partitionepoch")
    redis.Redis.from_url(settings.REDIS_URL).flushall()
    return int(tenant.id)


def _use_database(name: str) -> None:
    """Point every connection of this process at the database ``name``: the DatabaseWrappers
    of all threads share one settings dict (``settings.DATABASES["default"]``), and each opens
    its connection from it, so the engine's threads follow once the open ones are closed."""
    from django.conf import settings
    from django.db import connection, connections

    shared = settings.DATABASES["default"]
    assert connection.settings_dict is shared, "the connection's settings are a copy"
    connections.close_all()
    shared["NAME"] = name


def _shared_across_threads() -> bool:
    """Whether another thread's connection reads the same settings dict as this one's."""
    import threading

    from django.db import connection, connections

    seen: list[Any] = []
    thread = threading.Thread(target=lambda: seen.append(connections["default"].settings_dict))
    thread.start()
    thread.join()
    return bool(seen) and seen[0] is connection.settings_dict


def empty_copy() -> str:
    """A second database cloned from the migrated one (``CREATE DATABASE ... TEMPLATE``),
    before any history is generated: the claims' empty side. Its name."""
    from django.db import connection, connections

    assert _shared_across_threads(), "threads' connections do not share the settings dict"
    source = str(connection.settings_dict["NAME"])
    target = f"{source}_empty"
    # The template must have no session: this process's is closed, the copy is made from
    # the maintenance database.
    connections.close_all()
    with connection._nodb_cursor() as cursor:
        cursor.execute(f'CREATE DATABASE "{target}" TEMPLATE "{source}"')
    return target


def _history_runs() -> int:
    """Runs of the database in use, as the planner's statistics count them: the engine bench's
    own runs are gone and vacuumed by then, so this is the history. An exact count(*) would scan
    20,000,000 rows into the cache before one side only."""
    return int(
        _sql(
            "SELECT coalesce(sum(greatest(c.reltuples, 0)), 0)::bigint"
            "  FROM pg_partition_tree('jobs_jobrun') AS t JOIN pg_class AS c ON c.oid = t.relid"
            " WHERE t.isleaf"
        )[0][0]
    )


def _claims_once(args: argparse.Namespace, label: str) -> dict[str, str]:
    """The engine's spike and steady figures (bench/bench_engine.py) once, on the database in
    use; its bench tenant's jobs and runs are dropped again after them."""
    from bench import bench_engine

    figures = bench_engine.bench_spike(args.spike)
    figures.update(bench_engine.bench_steady(args.steady_rate, args.steady_s))
    _reset_keeping_history()
    _sql("VACUUM (ANALYZE) jobs_jobrun, jobs_job")
    for name, value in figures.items():
        print(f"claims, {label}: {name}: {value}", flush=True)
    return figures


def claims(
    args: argparse.Namespace, empty_db: str, full_db: str
) -> tuple[dict[str, list[str]], dict[str, list[str]], list[str]]:
    """The claims on both databases, interleaved: ``--claims-repeat`` rounds, each once on the
    empty history (E) and once on the full one (F), the side going first alternating (E F,
    F E, ...). Each side's figures' values in the order measured, and each round's order. The
    big history's database is in use again at the end."""
    from bench import bench_engine

    bench_engine._reset = _reset_keeping_history
    sides = {"E": (empty_db, "empty history"), "F": (full_db, f"{args.runs:,} runs of history")}
    found: dict[str, dict[str, list[str]]] = {"E": {}, "F": {}}
    orders: list[str] = []
    try:
        for db, _ in sides.values():
            _use_database(db)
            # The history's own jobs (generated active, one firing a minute) would fire.
            _sql("UPDATE jobs_job SET status = 'paused' WHERE status = 'active'")
            _reset_keeping_history()
        for round_ in range(args.claims_repeat):
            order = "EF" if round_ % 2 == 0 else "FE"
            orders.append(" ".join(order))
            for side in order:
                db, label = sides[side]
                _use_database(db)
                print(
                    f"claims round {round_ + 1}/{args.claims_repeat}, {side} ({label}), "
                    f"database {db}: {_history_runs():,} runs of history",
                    flush=True,
                )
                for name, value in _claims_once(args, f"{side}, {label}").items():
                    found[side].setdefault(name, []).append(value)
    finally:
        _use_database(full_db)
    return found["E"], found["F"], orders


def _value(figure: str, index: int = -1) -> float:
    """A figure such as "4.46" or "0.019 / 0.213 / 0.402" (its ``index``th) as a number."""
    return float(figure.split("/")[index].replace(",", ""))


def _median_of(values: list[str], index: int = -1) -> float:
    """The median of figures such as "4.46" or "0.019 / 0.213 / 0.402" (their ``index``th)."""
    return statistics.median(_value(v, index) for v in values)


# The claims' figures compared side by side: (name, index in the figure) -> label.
COMPARED = {
    ("spike: all published within (s after due)", -1): "spike, all published within",
    ("spike lateness p50 / p99 / max (s)", 1): "spike, p99 lateness",
    ("steady lateness p50 / p99 / max (s)", 1): "steady, p99 lateness",
}


def round_ratios(empty: dict[str, list[str]], full: dict[str, list[str]]) -> dict[str, list[float]]:
    """Per compared figure, each round's full / empty ratio (both sides of one round)."""
    ratios: dict[str, list[float]] = {}
    for (name, index), label in COMPARED.items():
        if name in empty and name in full:
            ratios[label] = [
                _value(f, index) / _value(e, index) if _value(e, index) else float("nan")
                for e, f in zip(empty[name], full[name], strict=True)
            ]
    return ratios


def _quantiles(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), statistics.quantiles(samples, n=20)[18]


def _requests(get: Callable[[str], Any], url: str, repeat: int) -> list[float]:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = get(url)
        samples.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]
    return samples


def readers(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    headers = {"Authorization": f"Bearer {data['key']}"}

    def api(url: str) -> Any:
        return client.get(url, headers=headers)

    job = data["big_job"]
    figures: dict[str, Any] = {}
    _requests(api, f"/v1/jobs/{job}", 5)  # warm-up
    figures["job_get"] = _quantiles(_requests(api, f"/v1/jobs/{job}", args.repeat))
    first = f"/v1/jobs/{job}/runs?limit=20"
    figures["runs_first"] = _quantiles(_requests(api, first, args.repeat))
    page = api(first).json()
    # Page 200 (4,000 runs deep), or the deepest full page of a smaller history.
    for _ in range(min(200, int(args.runs * args.big_share) // 20 - 2)):
        page = api(page["next"]).json()
    figures["runs_deep"] = _quantiles(_requests(api, page["next"], args.repeat))
    admin = Client()
    superuser = User.objects.filter(username="bench").first() or User.objects.create_superuser(
        "bench", "bench@example.com", "unused-pw-1"
    )
    admin.force_login(superuser)
    _requests(admin.get, "/admin/jobs/jobrun/", 2)  # warm-up
    admin_ms = _requests(admin.get, "/admin/jobs/jobrun/", args.admin_repeat)
    figures["admin_p50"] = statistics.median(admin_ms)
    figures["admin_page2_p50"] = statistics.median(
        _requests(admin.get, "/admin/jobs/jobrun/?p=2", args.admin_repeat)
    )
    # The old ways, as bare statements, once each after a warm-up run.
    old = {
        "count(*) of every run": "SELECT count(*) FROM jobs_jobrun",
        "GROUP BY state over all of the big job's runs":
            "SELECT state, count(*) FROM jobs_jobrun WHERE job_id = %s GROUP BY state",
        "date hierarchy: SELECT DISTINCT date_trunc('year', scheduled_for)":
            "SELECT DISTINCT date_trunc('year', scheduled_for) FROM jobs_jobrun",
    }  # fmt: skip
    figures["old"] = {}
    for name, statement in old.items():
        params = [job] if "%s" in statement else None
        _timed_sql(statement, params)
        figures["old"][name] = _timed_sql(statement, params)
    return figures


# A claim-like insert: the big job's next firings, one row per second ahead of now.
_INSERT_SQL = """
INSERT INTO jobs_jobrun (id, job_id, tenant_id, partition, scheduled_for, trigger, state,
                         attempt, epoch, dedup_key, worker, cancel_requested, last_error,
                         replayed_count, queued_at, created_at)
SELECT jobs_run_id(%s + make_interval(secs => g)), j.id, j.tenant_id, j.partition,
       %s + make_interval(secs => g),
       'schedule', 'queued', 1, 1, md5(%s::text || g::text), '', false, '', 0, %s, %s
  FROM jobs_job AS j, generate_series(1, %s) AS g
 WHERE j.id = %s
"""
_BY_FIRING = "run_by_firing"


def insert_cost(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, float]:
    """Milliseconds per 1,000 claimed runs inserted with and without run_by_firing, the
    index the admin's list added, alternating (the median of each)."""
    from beat_engine.clock import SystemClock

    definition = _on_every_partition(
        _sql("SELECT indexdef FROM pg_indexes WHERE indexname = %s", [_BY_FIRING])[0][0]
    )
    with_index: list[float] = []
    without: list[float] = []
    start = SystemClock().now() + timedelta(days=1)
    for round_ in range(args.insert_rounds):
        for has_index in (True, False):
            if not has_index:
                _sql(f"DROP INDEX {_BY_FIRING}")
            # Each insert its own day of firings (a day holds 86,400 one-second firings).
            at = start + timedelta(days=2 * round_ + (1 if has_index else 0))
            tag = f"{round_}-{has_index}-"
            ms = _timed_sql(_INSERT_SQL, [at, at, tag, at, at, args.insert_rows, data["big_job"]])
            (with_index if has_index else without).append(ms * 1000 / args.insert_rows)
            if not has_index:
                _sql(definition)
    _sql("DELETE FROM jobs_jobrun WHERE state = 'queued'")
    return {"with": statistics.median(with_index), "without": statistics.median(without)}


def plans(data: dict[str, Any]) -> dict[str, str]:
    from beat_engine.clock import SystemClock
    from jobs.job_figures import _FIGURES_SQL, FIGURES_WINDOW
    from jobs.run_windows import REACH_DAYS

    job = data["big_job"]
    window_since = SystemClock().now() - timedelta(days=REACH_DAYS[0])
    explain = "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY ON) "
    statements = {
        "GET /v1/jobs/{id}: figures and run_counts over the job's last 100 runs": (
            _FIGURES_SQL.format(since="").replace("%(job_id)s", f"'{job}'")
            .replace("%(window)s", str(FIGURES_WINDOW))
            .replace("%(succeeded)s", "'succeeded'").replace("%(dead)s", "'dead'")
            .replace("%(outcomes)s", "ARRAY['succeeded','failed','dead']")
            .replace("%(ended)s", "ARRAY['succeeded','failed','dead','cancelled','skipped']")
        ),
        # The first of the windows the page is read in (jobs/run_windows.py).
        "GET /v1/jobs/{id}/runs?limit=20: first page (its first window)": (
            f"SELECT * FROM jobs_jobrun WHERE tenant_id = {data['tenant'].id} AND job_id = "
            f"'{job}' AND scheduled_for >= '{window_since.isoformat()}' AND id >= "
            f"'{run_id_floor(window_since)}' ORDER BY scheduled_for DESC LIMIT 21"
        ),
        "the same page without the window's bounds (every partition planned)": (
            f"SELECT * FROM jobs_jobrun WHERE tenant_id = {data['tenant'].id} AND job_id = "
            f"'{job}' ORDER BY scheduled_for DESC LIMIT 21"
        ),
        "admin run list: first page": (
            "SELECT r.*, j.name FROM jobs_jobrun r JOIN jobs_job j ON j.id = r.job_id "
            "ORDER BY r.scheduled_for DESC, r.id DESC LIMIT 100"
        ),
        "admin run list: the bounded count": (
            "SELECT count(*) FROM (SELECT id FROM jobs_jobrun "
            "ORDER BY scheduled_for DESC, id DESC LIMIT 1001) AS subquery"
        ),
    }  # fmt: skip
    found = {}
    for name, statement in statements.items():
        rows = _sql(explain + statement)
        found[name] = "\n".join(row[0] for row in rows)
    return found


def purge(args: argparse.Namespace) -> dict[str, tuple[int, float]]:
    from beat_engine.clock import SystemClock
    from jobs.services.history_retention import PURGE_BATCH, PURGES, _locked_batch

    clock = SystemClock()
    now = clock.now()
    found: dict[str, tuple[int, float]] = {}
    for table, one in PURGES.items():
        deleted, started = 0, time.perf_counter()
        while True:
            n = _locked_batch(one, now=now, batch=PURGE_BATCH)
            deleted += n or 0
            if not n or n < PURGE_BATCH:
                break
        found[table] = (deleted, time.perf_counter() - started)
    return found


def _section(
    args: argparse.Namespace,
    data: dict[str, Any],
    figures: dict[str, Any],
    purged: dict[str, tuple[int, float]],
    when: str,
) -> str:
    command = "bench/bench_history.py " + " ".join(sys.argv[1:])
    lines = [
        "## Run history",
        "",
        f"`{command}` on {when}, this 2-core machine shared with other work (1-minute load "
        f"average {data['load'][0]:.0f} at the start, {data['load'][1]:.0f} at the end); embedded "
        f"PostgreSQL of its own, requests through Django's test client in process (no HTTP "
        f"server). **{args.runs:,} runs** generated with COPY in {data['copy_s']:.0f} s "
        f"(secondary indexes built after it in {data['index_s']:.0f} s, `VACUUM ANALYZE` "
        f"{data['vacuum_s']:.0f} s; table and indexes {data['table_mb']:,} MB), "
        f"{args.jobs:,} jobs; the measured job holds {args.big_share:.0%} of them "
        f"({int(args.runs * args.big_share):,} runs). No attempt rows. docs/history.md explains "
        "the readers and the purge.",
        "",
        f"| reader | p50 | p95 | p50, {args.baseline_runs:,} runs | p95, "
        f"{args.baseline_runs:,} runs |",
        "| --- | --- | --- | --- | --- |",
    ]
    base = figures["baseline"]
    readers_shown = {
        "job_get": "`GET /v1/jobs/{id}`",
        "runs_first": "`GET /v1/jobs/{id}/runs?limit=20`, first page",
        "runs_deep": "same, page 200 (cursor; fewer pages deep on the small history)",
    }
    lines += [
        f"| {label} | {figures[name][0]:.1f} ms | {figures[name][1]:.1f} ms "
        f"| {base[name][0]:.1f} ms | {base[name][1]:.1f} ms |"
        for name, label in readers_shown.items()
    ]
    lines += [
        f"| admin run list, first page (superuser) | {figures['admin_p50']:.0f} ms | "
        f"| {base['admin_p50']:.0f} ms | |",
        f"| admin run list, page 2 | {figures['admin_page2_p50']:.0f} ms | "
        f"| {base['admin_page2_p50']:.0f} ms | |",
        "",
        f"The same readers were measured first on a history of {args.baseline_runs:,} runs of "
        f"the same shape, in the same run. p50/p95 over {args.repeat} requests each (admin: "
        f"median of {args.admin_repeat}). What "
        "the old readers' statements cost on the same table, once each after a warm-up:",
        "",
        "| statement | time |",
        "| --- | --- |",
    ]
    lines += [f"| {name} | {ms:,.0f} ms |" for name, ms in figures["old"].items()]
    cost = figures["insert"]
    lines += [
        "",
        f"The admin list's index `run_by_firing` on the claim's path: a claim-like INSERT of "
        f"{args.insert_rows:,} queued runs into this table costs {cost['with']:.1f} ms per "
        f"1,000 runs with it and {cost['without']:.1f} ms without (medians of "
        f"{args.insert_rounds} alternating rounds).",
    ]
    if figures.get("claims"):
        empty, full = figures["claims"]
        orders = figures["claims_order"]
        lines += [
            "",
            f"The beat engine's claims beside the history (`--claims`: bench/bench_engine.py's "
            f"spike of {args.spike:,} firings due at once and steady {args.steady_rate:,} "
            f"firings/s for {args.steady_s} s, one node, in this process, no worker, the fixed "
            "broker bound), interleaved in one run: two databases of the same PostgreSQL, one "
            "copied from the migrated database before any history was generated (the empty "
            f"history, E), the other holding the {args.runs:,} runs (F, the history's jobs "
            f"paused); {len(orders)} rounds, each the spike and the steady rate once on each "
            f"side, the side going first alternating ({' · '.join(orders)}). Each cell lists "
            "the rounds in order:",
            "",
            "| figure | empty history | with the history |",
            "| --- | --- | --- |",
        ]
        lines += [
            f"| {name} | {' · '.join(values)} | {' · '.join(full.get(name, []))} |"
            for name, values in empty.items()
        ]
        lines.append("")
        for label, ratios in round_ratios(empty, full).items():
            name, index = next(key for key, shown in COMPARED.items() if shown == label)
            before, after = _median_of(empty[name], index), _median_of(full[name], index)
            lines.append(
                f"- {label}: the median of per-round ratios (with the history / empty) "
                f"{statistics.median(ratios):.2f}x over {len(ratios)} rounds (each round "
                f"{' · '.join(f'{r:.2f}' for r in ratios)}); medians {before:.3f} s empty, "
                f"{after:.3f} s with the history."
            )
    lines += [
        "",
        "The history purge (`jobs/services/history_retention.py`, batches of 5,000 rows, each "
        "its own transaction under the purge lock):",
        "",
        "| table | rows purged | time | rows/s |",
        "| --- | --- | --- | --- |",
    ]
    for table, (rows, seconds) in purged.items():
        rate = rows / seconds if seconds else 0.0
        lines.append(f"| `{table}` | {rows:,} | {seconds:.1f} s | {rate:,.0f} |")
    return "\n".join(lines) + "\n"


def _records(args: argparse.Namespace, figures: dict[str, Any],
             purged: dict[str, tuple[int, float]]) -> list[dict[str, Any]]:  # fmt: skip
    base = {"source": "bench-history", "runs": args.runs}
    records = [
        {**base, "metric": "job_get_p95", "value": figures["job_get"][1], "unit": "ms"},
        {**base, "metric": "runs_page_p95", "value": figures["runs_first"][1], "unit": "ms"},
        {**base, "metric": "runs_deep_page_p95", "value": figures["runs_deep"][1], "unit": "ms"},
        {**base, "metric": "admin_run_list_p50", "value": figures["admin_p50"], "unit": "ms"},
    ]
    for table, (rows, seconds) in purged.items():
        rate = rows / seconds if seconds else 0.0
        records.append({**base, "metric": f"purge_{table}", "value": rate, "unit": "rows/s"})
    return records


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2_000_000)
    parser.add_argument(
        "--baseline-runs", type=int, default=10_000, help="the small history read first"
    )
    parser.add_argument("--jobs", type=int, default=1_000)
    parser.add_argument("--big-share", type=float, default=0.1)
    parser.add_argument("--keys", type=int, default=500_000)
    parser.add_argument("--letters", type=int, default=20_000)
    parser.add_argument("--results", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--admin-repeat", type=int, default=10)
    parser.add_argument("--insert-rows", type=int, default=50_000, help="at most 86,400")
    parser.add_argument("--insert-rounds", type=int, default=3)
    parser.add_argument(
        "--claims",
        action="store_true",
        help="engine spike/steady, empty history vs loaded, interleaved",
    )
    parser.add_argument("--partition-days", type=int, default=31)
    parser.add_argument(
        "--claims-repeat", type=int, default=5, help="interleaved rounds (E F, F E, ...)"
    )
    parser.add_argument("--spike", type=int, default=50_000)
    parser.add_argument("--steady-rate", type=int, default=1_000)
    parser.add_argument("--steady-s", type=int, default=30)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep .local/bench_history")
    return parser.parse_args()


def main() -> int:
    args = _arguments()
    shutil.rmtree(SERVICES, ignore_errors=True)
    embedded = _setup()
    try:
        from django.conf import settings

        from beat_engine.clock import SystemClock

        now = SystemClock().now()
        load_at_start = os.getloadavg()[0]
        full_db = str(settings.DATABASES["default"]["NAME"])
        empty_db = empty_copy() if args.claims else ""
        if args.claims:
            print(f"claims: empty history in database {empty_db}, copied from {full_db}")
        # The readers side by side: first on a small history, the same shape, then on the big.
        # Runs only: the purge's keys, letters and results are the big history's.
        small_args = argparse.Namespace(
            **{**vars(args), "runs": args.baseline_runs, "keys": 0, "letters": 0, "results": 0}
        )
        baseline = readers(small_args, generate(small_args, now))
        started = time.perf_counter()
        data = generate(args, now)
        print(
            f"generated {args.runs:,} runs in {time.perf_counter() - started:.0f} s "
            f"(COPY {data['copy_s']:.0f} s, indexes {data['index_s']:.0f} s, "
            f"VACUUM ANALYZE {data['vacuum_s']:.0f} s, "
            f"{data['table_mb']:,} MB)",
            flush=True,
        )
        data["load"] = (load_at_start, 0.0)
        figures = readers(args, data)
        figures["baseline"] = baseline
        if args.claims:
            empty_claims, full_claims, orders = claims(args, empty_db, full_db)
            figures["claims"] = (empty_claims, full_claims)
            figures["claims_order"] = orders
            print(f"claims: rounds in order {' · '.join(orders)}; back on database "
                  f"{settings.DATABASES['default']['NAME']}")  # fmt: skip
            for label, ratios in round_ratios(empty_claims, full_claims).items():
                print(f"claims ratio with the history / empty, {label}: per round "
                      f"{' · '.join(f'{r:.2f}' for r in ratios)}; median "
                      f"{statistics.median(ratios):.2f}x")  # fmt: skip
        for name in ("job_get", "runs_first", "runs_deep"):
            print(f"{name}: p50 {figures[name][0]:.1f} ms, p95 {figures[name][1]:.1f} ms; "
                  f"on {args.baseline_runs:,} runs p50 {baseline[name][0]:.1f} ms, "
                  f"p95 {baseline[name][1]:.1f} ms")  # fmt: skip
        print(f"admin run list: p50 {figures['admin_p50']:.0f} ms, page 2 "
              f"{figures['admin_page2_p50']:.0f} ms")  # fmt: skip
        for name, ms in figures["old"].items():
            print(f"old: {name}: {ms:,.0f} ms")
        # The plans before the insert measurement, whose deleted rows leave dead index
        # entries at the head of the measured job's history.
        found = plans(data)
        for name, plan in found.items():
            print(f"--- {name}\n{plan}")
        cost = insert_cost(args, data)
        print(
            f"claim-like insert of {args.insert_rows:,} runs: {cost['with']:.1f} ms per 1,000 "
            f"with run_by_firing, {cost['without']:.1f} ms without (medians of "
            f"{args.insert_rounds})"
        )
        figures["insert"] = cost
        purged = purge(args)
        for table, (rows, seconds) in purged.items():
            print(f"purge {table}: {rows:,} rows in {seconds:.1f} s")
        data["load"] = (load_at_start, os.getloadavg()[0])
        if args.write_docs:
            when = now.date().isoformat()
            replace_section("Run history", _section(args, data, figures, purged, when))
            replace_records("bench-history", _records(args, figures, purged))
    finally:
        embedded.stop()
        if not args.keep:
            shutil.rmtree(SERVICES, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
