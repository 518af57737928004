"""Redis failover benchmark: the Sentinel-managed master is SIGKILLed under a steady load.

    .venv/bin/python bench/bench_redis_failover.py [--jobs 50] [--before-s 5] [--after-s 10]
                                                   [--write-docs] [--docs-from RESULT]

Starts its own embedded PostgreSQL in .local/redis-failover-bench, and a Redis master, a
replica and three sentinels on loopback (tests/support/sentinel.py: down-after 1 s, failover
timeout 3 s). ``--jobs`` interval jobs fire once a second each, spread over the second, so the
load is steady at that many firings/s; one beat node and one worker (4 processes) reach Redis
through the Sentinel URL only. After ``--before-s`` of load the master is SIGKILLed; the load
goes on for ``--after-s`` after the promotion, then the jobs are paused and every run drains.

Figures: the promotion (kill -> every sentinel names the replica), the time to resume (kill ->
the first firing published after it), firings lost (an instant of a job's schedule without a
succeeded run) and duplicate effects (executions of the target beyond one per run, counted by
the target's own table), the largest publish lateness of the firings due during the failover
and the p99 before it, and what the node logged. With --write-docs it replaces the
"## Redis failover (Sentinel)" section of docs/benchmarks.md and its records (source
"bench-redis-failover") in docs/benchmarks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import _seed, _setup  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "Redis failover (Sentinel)"
SOURCE = "bench-redis-failover"
LOG_DIR = ROOT / ".local" / "redis-failover-bench"
FAST = {
    "SCHEDULER_LEASE_TTL_S": "2",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    "SCHEDULER_RUN_LEASE_S": "3",
    "SCHEDULER_HEARTBEAT_S": "0.5",
}


def _row(sql: str, params: list[Any] | None = None) -> tuple[Any, ...]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        row = cursor.fetchone()
        return tuple(row) if row else ()


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _wait(predicate: Any, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise SystemExit(f"bench timed out waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - start


def _events(log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                name = str(json.loads(line).get("event"))
            except ValueError:
                continue
            counts[name] = counts.get(name, 0) + 1
    return counts


def run(jobs: int, before_s: float, after_s: float) -> dict[str, Any]:
    from beat_engine.clock import SystemClock
    from bench.failover_targets import EFFECTS_TABLE, ensure_effects_table
    from tests.support.sentinel import SentinelCluster

    cluster = SentinelCluster(LOG_DIR / "redis-ha")
    cluster.start()
    anchor = SystemClock().now() + timedelta(seconds=10)
    _seed(jobs, anchor=anchor, spread_ms=1000, interval_s=1, prefix="failover-")
    _row(
        "UPDATE jobs_job SET target_name = 'bench.effect', catchup_policy = 'replay_all', "
        "catchup_limit = 1000 RETURNING 1"
    )
    ensure_effects_table()
    env = {
        **os.environ, **FAST, **cluster.env(), "PYTHONPATH": str(ROOT),
        "SCHEDULER_CLIENT_MODULES": "scheduler_project.demo,bench.failover_targets",
    }  # fmt: skip
    env.pop("CELERY_BROKER_URL", None)
    node_log, worker_log = LOG_DIR / "node.log", LOG_DIR / "worker.log"
    node_log.write_text("")
    worker_log.write_text("")
    worker = _spawn(
        [sys.executable, "-m", "celery", "-A", "scheduler_project", "worker", "--pool",
         "prefork", "--concurrency", "4", "-Q", "scheduler", "--loglevel", "WARNING",
         "--without-mingle", "--without-gossip", "--without-heartbeat"],
        env, worker_log,
    )  # fmt: skip
    node = _spawn(
        [sys.executable, "manage.py", "beat_engine", "--node-id", "failover"], env, node_log
    )
    result: dict[str, Any] = {
        "jobs": jobs, "before_s": before_s, "after_s": after_s,
        "measured_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
    }  # fmt: skip
    try:
        succeeded = "SELECT count(*) FROM jobs_jobrun WHERE state = 'succeeded'"
        _wait(lambda: _row(succeeded)[0] >= jobs, 120, "a first second of firings")
        time.sleep(before_s)
        killed_at = SystemClock().now()
        cluster.kill_master()
        cluster.wait_promoted()
        promoted_at = SystemClock().now()
        time.sleep(after_s)
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
        for proc in (node, worker):
            if proc.poll() is None:
                proc.terminate()
        for proc in (node, worker):
            proc.wait(timeout=60)
        cluster.stop()
    result["promotion_s"] = (promoted_at - killed_at).total_seconds()
    # The first push after the kill (scheduled_for + lateness is the first push's instant).
    (first_after,) = _row(
        "SELECT min(scheduled_for + lateness) FROM jobs_jobrun WHERE scheduled_for + lateness > %s",
        [killed_at],
    )
    result["resume_s"] = (first_after - killed_at).total_seconds()
    (last_before,) = _row(
        "SELECT max(scheduled_for + lateness) FROM jobs_jobrun "
        "WHERE scheduled_for + lateness <= %s",
        [killed_at],
    )
    result["last_publish_before_kill_s"] = (killed_at - last_before).total_seconds()
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
    # Firings lost: instants from the anchor to each job's last firing without a succeeded run.
    (expected, runs_ok) = _row(
        "SELECT sum(floor(extract(epoch FROM j.last_fire_at - j.anchor_at)) + 1)::bigint, "
        "(SELECT count(*) FROM jobs_jobrun WHERE state = 'succeeded') "
        "FROM jobs_job j WHERE j.last_fire_at IS NOT NULL"
    )
    (distinct_firings,) = _row(
        "SELECT count(DISTINCT (job_id, scheduled_for)) FROM jobs_jobrun WHERE state = 'succeeded'"
    )
    result["firings"] = int(expected)
    result["runs_succeeded"] = int(runs_ok)
    result["lost"] = int(expected) - int(distinct_firings)
    (effects, keys) = _row(f"SELECT count(*), count(DISTINCT key) FROM {EFFECTS_TABLE}")
    result["effects"] = int(effects)
    result["duplicate_effects"] = int(effects) - int(keys)
    (min_epoch,) = _row("SELECT min(epoch) FROM jobs_partitionepoch")
    result["min_epoch_after"] = int(min_epoch)
    result["events"] = _events(node_log)
    return result


def figures(r: dict[str, Any]) -> dict[str, str]:
    ev = r["events"]
    return {
        "load (firings/s, one beat node, one worker of 4 processes)": f"{r['jobs']}",
        "firings (from the first to each job's last) / runs succeeded":
            f"{r['firings']:,} / {r['runs_succeeded']:,}",
        "master SIGKILLed -> every sentinel names the replica (s)": f"{r['promotion_s']:.2f}",
        "master SIGKILLed -> first firing published (time to resume, s)": f"{r['resume_s']:.2f}",
        "max publish lateness of the firings due during the failover (s)":
            f"{r['max_lateness_failover_s']:.2f}",
        "p99 publish lateness before the failover (s)": f"{r['p99_lateness_before_s']:.3f}",
        "firings lost": f"{r['lost']}",
        "duplicate effects (target executions beyond one per run)": f"{r['duplicate_effects']}",
        "beat node / worker still the same processes": f"{r['node_alive']} / {r['worker_alive']}",
        "node's failed ticks / lease losses / runs sent again":
            f"{ev.get('beat.tick_failed', 0)} / {ev.get('beat.lease.lost', 0)} / "
            f"{ev.get('beat.republish', 0)} batches",
        "lowest partition epoch afterwards (1 = never re-taken)": f"{r['min_epoch_after']}",
    }  # fmt: skip


def write_docs(r: dict[str, Any], command: str) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures(r).items())
    body = (
        f"## {TITLE}\n\n"
        f"Measured {r['measured_at']} UTC on this 2-core machine (shared with other work): "
        "embedded PostgreSQL, a Redis master, a replica and three sentinels on loopback "
        "(down-after 1 s, failover timeout 3 s), one beat node and one worker reaching Redis "
        "through the Sentinel URL only, lease TTL 2 s. Regenerated by the command; not edited "
        f"by hand.\nCommand: `{command}`\n\n"
        f"After {r['before_s']:.0f} s of steady load the master is SIGKILLed; the load goes on "
        f"for {r['after_s']:.0f} s after the promotion, then the jobs are paused and every run "
        "drains. The firings due while no master answers are claimed in PostgreSQL and "
        "published in one batch once the node reaches the promoted replica; lease keys the "
        'replica lacks are taken again with new epochs (docs/operations.md, "Redis failover '
        '(Sentinel)").\n\n'
        f"| figure | value |\n| --- | --- |\n{rows}\n"
    )
    replace_section(TITLE, body)
    metrics: list[tuple[str, float, str]] = [
        ("promotion", r["promotion_s"], "s"),
        ("resume", r["resume_s"], "s"),
        ("max_lateness_failover", r["max_lateness_failover_s"], "s"),
        ("p99_lateness_before", r["p99_lateness_before_s"], "s"),
        ("lost", r["lost"], "firings"),
        ("duplicate_effects", r["duplicate_effects"], "effects"),
    ]
    records = [
        {"source": SOURCE, "scheduler": "ours-1", "scenario": "redis-failover", "n": r["jobs"],
         "metric": name, "value": value, "unit": unit}
        for name, value, unit in metrics
    ]  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--before-s", type=float, default=5.0)
    parser.add_argument("--after-s", type=float, default=10.0)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--docs-from", type=Path, help="a result.json of an earlier run")
    args = parser.parse_args()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    if args.docs_from:
        saved = json.loads(args.docs_from.read_text())
        write_docs(saved["result"], saved["command"])
        return 0
    services = _setup(LOG_DIR / "services")
    try:
        result = run(args.jobs, args.before_s, args.after_s)
    finally:
        services.stop()
    command = "python " + " ".join(sys.argv)
    (LOG_DIR / "result.json").write_text(
        json.dumps({"result": result, "command": command}, default=str)
    )
    for key, value in figures(result).items():
        print(f"{key:70} {value}")
    if args.write_docs:
        write_docs(result, command)
    failed = result["lost"] or result["duplicate_effects"]
    return 1 if failed or not (result["node_alive"] and result["worker_alive"]) else 0


if __name__ == "__main__":
    sys.exit(main())
