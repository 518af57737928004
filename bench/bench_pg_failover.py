"""PostgreSQL failover benchmark: the primary is SIGKILLed under a steady load and its
synchronous standby promoted.

    .venv/bin/python bench/bench_pg_failover.py [--jobs 50] [--before-s 5] [--outage-s 2]
                                                [--after-s 10] [--write-docs]

Starts a PostgreSQL primary and a streaming standby from the embedded binaries
(tests/support/pg_replication.py: Unix sockets, synchronous_standby_names = '*') and an
embedded Redis, under .local/pg-failover-bench. ``--jobs`` interval jobs fire once a second
each, spread over the second, against a local HTTP target that counts each firing's
executions by its Idempotency-Key; an API client creates a one-off job every 0.25 s through the
web stack (tests/support/pg_failover_client.py). One beat node, one worker (4 processes) and
the client reach PostgreSQL through DATABASE_URL listing both hosts with
target_session_attrs=read-write. After ``--before-s`` the primary is SIGKILLed; ``--outage-s``
later (a failover tool's detection time) the standby is promoted with ``pg_ctl promote``; the
load goes on for ``--after-s``, then the jobs are paused and every run drains.

Figures: the time to resume (promotion -> the first firing published after it), firings lost
(an instant of a job's schedule without a succeeded run), committed runs lost (seen before the
kill, missing after), duplicate effects (target executions beyond one per firing), the largest
publish lateness of the firings due during the failover and the p99 before it, the API's
answers, and what the node logged. With --write-docs it replaces the "## PostgreSQL failover"
section of docs/benchmarks.md and its records (source "bench-pg-failover") in
docs/benchmarks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import _seed  # noqa: E402
from bench.bench_redis_failover import _events, _spawn, _wait  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "PostgreSQL failover"
SOURCE = "bench-pg-failover"
LOG_DIR = ROOT / ".local" / "pg-failover-bench"
FAST = {
    "SCHEDULER_LEASE_TTL_S": "3",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    "SCHEDULER_RUN_LEASE_S": "5",
    "SCHEDULER_HEARTBEAT_S": "0.5",
}


class _Target:
    """Counts each firing's executions by the Idempotency-Key the worker sends."""

    def __init__(self) -> None:
        self.hits: Counter[str] = Counter()
        lock = threading.Lock()
        hits = self.hits

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    hits[self.headers.get("Idempotency-Key", "")] += 1
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"


def _row(sql: str, params: list[Any] | None = None) -> tuple[Any, ...]:
    from django.db import connection

    from jobs.db_failover import retry_on_failover

    def read() -> tuple[Any, ...]:
        with connection.cursor() as cursor:
            cursor.execute(sql, params or [])
            row = cursor.fetchone()
            return tuple(row) if row else ()

    return retry_on_failover(read)


def run(jobs: int, before_s: float, outage_s: float, after_s: float) -> dict[str, Any]:
    from django.db import connection

    from beat_engine.clock import SystemClock
    from tests.support.pg_replication import ReplicatedPostgres

    clock = SystemClock()
    target = _Target()
    anchor = clock.now() + timedelta(seconds=10)
    _seed(jobs, anchor=anchor, spread_ms=1000, interval_s=1, prefix="failover-")
    _row(
        "UPDATE jobs_job SET target_kind = 'http', target_name = '', target_url = %s, "
        "catchup_policy = 'replay_all', catchup_limit = 1000 RETURNING 1",
        [f"http://{target.address}/ok"],
    )
    env = {
        **os.environ, **FAST, "PYTHONPATH": str(ROOT),
        "SCHEDULER_HTTP_ALLOWLIST": target.address,
    }  # fmt: skip
    env.pop("CELERY_BROKER_URL", None)
    node_log, worker_log = LOG_DIR / "node.log", LOG_DIR / "worker.log"
    answers = LOG_DIR / "answers.jsonl"
    for path in (node_log, worker_log, answers):
        path.write_text("")
    answers.with_suffix(".stop").unlink(missing_ok=True)
    worker = _spawn(
        [sys.executable, "-m", "celery", "-A", "scheduler_project", "worker", "--pool",
         "prefork", "--concurrency", "4", "-Q", "scheduler", "--loglevel", "WARNING",
         "--without-mingle", "--without-gossip", "--without-heartbeat"],
        env, worker_log,
    )  # fmt: skip
    node = _spawn(
        [sys.executable, "manage.py", "beat_engine", "--node-id", "pg-failover"], env, node_log
    )
    client = _spawn(
        [sys.executable, "-m", "tests.support.pg_failover_client", str(answers),
         f"http://{target.address}/ok", "0"],
        env, LOG_DIR / "client.log",
    )  # fmt: skip
    db: ReplicatedPostgres = RUNNING["db"]
    result: dict[str, Any] = {
        "jobs": jobs, "before_s": before_s, "outage_s": outage_s, "after_s": after_s,
        "measured_at": f"{clock.now():%Y-%m-%d %H:%M}",
    }  # fmt: skip
    try:
        succeeded = "SELECT count(*) FROM jobs_jobrun WHERE state = 'succeeded'"
        _wait(lambda: _row(succeeded)[0] >= jobs, 120, "a first second of firings")
        time.sleep(before_s)
        runs_before = {r[0] for r in _rows("SELECT id FROM jobs_jobrun")}
        killed_at = clock.now()
        db.primary.kill()
        connection.close()
        time.sleep(outage_s)
        db.promote_standby()
        promoted_at = clock.now()
        time.sleep(after_s)
        answers.with_suffix(".stop").touch()
        client.wait(timeout=60)
        result["node_alive"] = node.poll() is None
        result["worker_alive"] = worker.poll() is None
        _row("UPDATE jobs_job SET status = 'paused' RETURNING 1")
        unfinished = (
            "SELECT count(*) FROM jobs_jobrun WHERE state NOT IN ('succeeded', 'dead', 'failed')"
        )
        _wait(lambda: _row(unfinished)[0] == 0, 300, "every run to finish")
        result["node_alive"] = result["node_alive"] and node.poll() is None
        result["worker_alive"] = result["worker_alive"] and worker.poll() is None
    finally:
        for proc in (client, node, worker):
            if proc.poll() is None:
                proc.terminate()
        for proc in (client, node, worker):
            proc.wait(timeout=60)
        target.server.shutdown()
    result["outage_measured_s"] = (promoted_at - killed_at).total_seconds()
    (first_after,) = _row(
        "SELECT min(scheduled_for + lateness) FROM jobs_jobrun WHERE scheduled_for + lateness > %s",
        [promoted_at],
    )
    result["resume_s"] = (first_after - promoted_at).total_seconds()
    (worst,) = _row(
        "SELECT max(extract(epoch FROM lateness)) FROM jobs_jobrun "
        "WHERE scheduled_for BETWEEN %s AND %s",
        [killed_at - timedelta(seconds=1), promoted_at + timedelta(seconds=2)],
    )
    result["max_lateness_failover_s"] = float(worst or 0)
    (p99,) = _row(
        "SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)) "
        "FROM jobs_jobrun WHERE scheduled_for < %s",
        [killed_at - timedelta(seconds=1)],
    )
    result["p99_lateness_before_s"] = float(p99 or 0)
    (expected,) = _row(
        "SELECT sum(floor(extract(epoch FROM j.last_fire_at - j.anchor_at)) + 1)::bigint "
        "FROM jobs_job j WHERE j.last_fire_at IS NOT NULL AND j.interval_seconds IS NOT NULL"
    )
    (distinct_firings,) = _row(
        "SELECT count(DISTINCT (r.job_id, r.scheduled_for)) FROM jobs_jobrun r "
        "JOIN jobs_job j ON j.id = r.job_id "
        "WHERE r.state = 'succeeded' AND j.interval_seconds IS NOT NULL"
    )
    result["firings"] = int(expected)
    result["lost"] = int(expected) - int(distinct_firings)
    runs_after = {r[0] for r in _rows("SELECT id FROM jobs_jobrun")}
    result["committed_runs_before"] = len(runs_before)
    result["committed_runs_lost"] = len(runs_before - runs_after)
    (runs_total,) = _row("SELECT count(*) FROM jobs_jobrun WHERE state = 'succeeded'")
    result["runs_succeeded"] = int(runs_total)
    result["effects"] = sum(target.hits.values())
    result["duplicate_effects"] = sum(n - 1 for n in target.hits.values() if n > 1)
    statuses = Counter(
        json.loads(line)["status"] for line in answers.read_text().splitlines() if line
    )
    result["api_answers"] = {str(k): v for k, v in sorted(statuses.items())}
    result["events"] = _events(node_log)
    return result


def _rows(sql: str) -> list[tuple[Any, ...]]:
    from django.db import connection

    from jobs.db_failover import retry_on_failover

    def read() -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(sql)
            return [tuple(r) for r in cursor.fetchall()]

    return retry_on_failover(read)


RUNNING: dict[str, Any] = {}


def figures(r: dict[str, Any]) -> dict[str, str]:
    ev = r["events"]
    answers = r["api_answers"]
    return {
        "load (firings/s, one beat node, one worker of 4 processes)": f"{r['jobs']}",
        "firings of the interval jobs / runs succeeded (with the API's one-off jobs)":
            f"{r['firings']:,} / {r['runs_succeeded']:,}",
        "primary SIGKILLed -> standby promoted (the outage, s)": f"{r['outage_measured_s']:.2f}",
        "promotion -> first firing published (time to resume, s)": f"{r['resume_s']:.2f}",
        "max publish lateness of the firings due during the failover (s)":
            f"{r['max_lateness_failover_s']:.2f}",
        "p99 publish lateness before the failover (s)": f"{r['p99_lateness_before_s']:.3f}",
        "firings lost": f"{r['lost']}",
        "committed runs lost (of those seen before the kill)":
            f"{r['committed_runs_lost']} of {r['committed_runs_before']:,}",
        "duplicate effects (target executions beyond one per firing)":
            f"{r['duplicate_effects']} (of {r['effects']:,} executions)",
        "API answers 201 / 503 / other":
            f"{answers.get('201', 0)} / {answers.get('503', 0)} / "
            f"{sum(v for k, v in answers.items() if k not in ('201', '503'))}",
        "beat node / worker still the same processes": f"{r['node_alive']} / {r['worker_alive']}",
        "node's database-lost ticks / other failed ticks / runs sent again":
            f"{ev.get('beat.database_lost', 0)} / {ev.get('beat.tick_failed', 0)} / "
            f"{ev.get('beat.republish', 0)} batches",
    }  # fmt: skip


def write_docs(r: dict[str, Any], command: str) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures(r).items())
    body = (
        f"## {TITLE}\n\n"
        f"Measured {r['measured_at']} UTC on this 2-core machine (shared with other work): a "
        "PostgreSQL primary and a synchronous streaming standby from the embedded binaries on "
        "Unix sockets, embedded Redis, one beat node, one worker and an API client on a "
        "DATABASE_URL listing both hosts with target_session_attrs=read-write, lease TTL 3 s. "
        f"Regenerated by the command; not edited by hand.\nCommand: `{command}`\n\n"
        f"After {r['before_s']:.0f} s of steady load the primary is SIGKILLed; "
        f"{r['outage_s']:.0f} s later (a failover tool's detection) the standby is promoted "
        f"with `pg_ctl promote`; the load goes on for {r['after_s']:.0f} s, then the jobs are "
        "paused and every run drains. Nothing is restarted: the firings due while no primary "
        "answers are claimed once the engine reaches the promoted standby "
        '(docs/operations.md, "PostgreSQL failover").\n\n'
        f"| figure | value |\n| --- | --- |\n{rows}\n"
    )
    replace_section(TITLE, body)
    metrics: list[tuple[str, float, str]] = [
        ("resume", r["resume_s"], "s"),
        ("max_lateness_failover", r["max_lateness_failover_s"], "s"),
        ("p99_lateness_before", r["p99_lateness_before_s"], "s"),
        ("lost", r["lost"], "firings"),
        ("committed_runs_lost", r["committed_runs_lost"], "runs"),
        ("duplicate_effects", r["duplicate_effects"], "effects"),
    ]
    records = [
        {"source": SOURCE, "scheduler": "ours-1", "scenario": "pg-failover", "n": r["jobs"],
         "metric": name, "value": value, "unit": unit}
        for name, value, unit in metrics
    ]  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--before-s", type=float, default=5.0)
    parser.add_argument("--outage-s", type=float, default=2.0)
    parser.add_argument("--after-s", type=float, default=10.0)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    from scheduler_project.embedded import RedisServer
    from tests.support.pg_replication import ReplicatedPostgres

    db = ReplicatedPostgres.create()
    redis = RedisServer(LOG_DIR / "redis")
    try:
        db.start()
        redis.start()
        RUNNING["db"] = db
        os.environ.update({"DATABASE_URL": db.url, "REDIS_URL": redis.url})
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        result = run(args.jobs, args.before_s, args.outage_s, args.after_s)
    finally:
        redis.stop()
        db.stop()
    command = "python " + " ".join(sys.argv)
    (LOG_DIR / "result.json").write_text(
        json.dumps({"result": result, "command": command}, default=str)
    )
    for key, value in figures(result).items():
        print(f"{key:75} {value}")
    if args.write_docs:
        write_docs(result, command)
    failed = result["lost"] or result["duplicate_effects"] or result["committed_runs_lost"]
    return 1 if failed or not (result["node_alive"] and result["worker_alive"]) else 0


if __name__ == "__main__":
    sys.exit(main())
