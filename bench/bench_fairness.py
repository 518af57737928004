"""Fairness under a burst: one tenant's burst of firings beside another tenant's job, with real
workers (run by hand).

    .venv/bin/python bench/bench_fairness.py [--a-jobs 200000] [--b-interval-s 10]
        [--bound 100000] [--target-wait-s 1] [--observe-s 300] [--workers 2]
        [--concurrency 2] [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/fairness-bench, seeds tenant A with
``--a-jobs`` jobs and tenant B with one job (every ``--b-interval-s``), all due at the same
instant, starts one `manage.py beat_engine` node (the broker queue bounded at ``--bound``
messages at most, SCHEDULER_BROKER_QUEUE_MAX_DEPTH; 0: no bound; below it the bound adapts to
the queue's drain rate, ``--target-wait-s`` of it, SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S; 0: the
fixed bound only) and ``--workers`` Celery workers, which A's backlog saturates. Waits until
every run of A has finished, or for ``--observe-s`` seconds after the instant (A's backlog
still draining: 200,000 runs take over an hour at the 40 runs/s of two small workers), sampling
the broker's depth and Redis's used_memory. Prints B's publish and start lateness at the
instant and at each of its later firings while A drains, and A's drain time. With --write-docs
it replaces the "## Fairness under a burst" section of docs/benchmarks.md and its records (source
"bench-fairness") in docs/benchmarks.json.
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

from bench.bench_engine import SEED_SQL, _reset, _setup  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "Fairness under a burst"
SOURCE = "bench-fairness"
LOG_DIR = ROOT / ".local" / "fairness-bench"
# The instant is this far ahead when seeding starts, and at least MIN_LEAD ahead once it is
# done: the node starts, takes its partitions and loads the horizon (200,000 entries: about
# 5 s here) before it.
SEED_LEAD = timedelta(seconds=45)
MIN_LEAD = timedelta(seconds=30)


def _sql(query: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return list(cursor.fetchall()) if cursor.description else []


def _seed(a_jobs: int, b_interval_s: int, anchor: datetime) -> tuple[int, int, datetime]:
    """Seed A's and B's jobs due at ``anchor``; returns the tenants and the instant, moved
    later when seeding outlasted its lead (then the node would still be loading A's 200,000
    entries at the instant, which would measure its start, not its fairness)."""
    from beat_engine.clock import SystemClock
    from jobs.models import Tenant

    _reset()
    a = Tenant.objects.get(name="bench")
    # A's whole burst is claimed (queued in PostgreSQL): its queued-runs cap is not the point.
    Tenant.objects.filter(id=a.id).update(max_queued_runs=a_jobs + 10_000)
    b, _ = Tenant.objects.get_or_create(name="bench-b", defaults={"created_at": anchor})
    for tenant, prefix, count, interval in (
        (a.id, "a-", a_jobs, 86_400),
        (b.id, "b-", 1, b_interval_s),
    ):
        _sql(SEED_SQL, {"tenant": tenant, "prefix": prefix, "interval": interval, "anchor": anchor,
                        "spread": 1, "count": count})  # fmt: skip
    # B's job in the partition loaded last into the horizon: behind all of A's in load order.
    _sql("UPDATE jobs_job SET partition = 63 WHERE tenant_id = %s", [b.id])
    shift = SystemClock().now() + MIN_LEAD - anchor
    if shift > timedelta(0):
        _sql(
            "UPDATE jobs_job SET anchor_at = anchor_at + %s, next_fire_at = next_fire_at + %s",
            [shift, shift],
        )
        anchor += shift
    _sql("ANALYZE jobs_job")
    return a.id, b.id, anchor


def _spawn(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _broker() -> Any:
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.REDIS_URL)


def _depth(client: Any) -> int:
    from beat_engine.publisher import PRIORITY_STEPS, queue_key

    keys = sorted({queue_key("scheduler", step) for step in PRIORITY_STEPS})
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.llen(key)
    return sum(int(n) for n in pipe.execute())


def run(args: argparse.Namespace) -> dict[str, Any]:
    from beat_engine.clock import SystemClock

    anchor = SystemClock().now() + SEED_LEAD
    a_id, b_id, anchor = _seed(args.a_jobs, args.b_interval_s, anchor)
    env = {**os.environ, "SCHEDULER_BROKER_QUEUE_MAX_DEPTH": str(args.bound),
           "SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S": str(args.target_wait_s)}  # fmt: skip
    client = _broker()
    procs: list[subprocess.Popen[bytes]] = []
    result: dict[str, Any] = {
        "a_jobs": args.a_jobs, "b_interval_s": args.b_interval_s, "bound": args.bound,
        "target_wait_s": args.target_wait_s, "observe_s": args.observe_s,
        "workers": args.workers, "concurrency": args.concurrency,
        "measured_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
    }  # fmt: skip
    samples: list[tuple[float, int, float]] = []
    try:
        node_log = LOG_DIR / "node.log"
        node_log.write_text("")
        procs.append(_spawn([sys.executable, "manage.py", "beat_engine", "--node-id", "fair"],
                            node_log, env))  # fmt: skip
        for index in range(args.workers):
            log = LOG_DIR / f"worker-{index}.log"
            log.write_text("")
            procs.append(_spawn(
                [sys.executable, "-m", "celery", "-A", "scheduler_project", "worker", "--pool",
                 "prefork", "--concurrency", str(args.concurrency), "-Q", "scheduler",
                 "--loglevel", "WARNING", "-n", f"fair-{index}@%h", "--without-mingle",
                 "--without-gossip", "--without-heartbeat"], log, env))  # fmt: skip
        unfinished = "SELECT count(*) FROM jobs_jobrun WHERE tenant_id = %s AND finished_at IS NULL"
        deadline = time.monotonic() + args.timeout_s
        start = time.monotonic()
        drained = False
        while time.monotonic() < deadline:
            time.sleep(0.5)
            now = SystemClock().now()
            info = client.info("memory")
            samples.append(((now - anchor).total_seconds(), _depth(client),
                            int(info["used_memory"]) / 2**20))  # fmt: skip
            if now < anchor + timedelta(seconds=5):
                continue
            if args.observe_s and now >= anchor + timedelta(seconds=args.observe_s):
                break
            claimed = _sql("SELECT count(*) FROM jobs_jobrun WHERE tenant_id = %s", [a_id])[0][0]
            left = _sql(unfinished, [a_id])[0][0]
            if claimed >= args.a_jobs and left == 0:
                drained = True
                break
        else:
            raise SystemExit("bench timed out before A's burst drained")
        result["wall_s"] = time.monotonic() - start
        result["drained"] = drained
        if drained:
            # B's job keeps firing while A drains: one more firing after the drain, then stop.
            time.sleep(args.b_interval_s + 5)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            proc.wait(timeout=120)
    result["samples"] = samples
    # Only B's firings due while the bench watched (a firing due as it stopped is cut off).
    result["observed_until_s"] = samples[-1][0] if samples else 0.0
    result["b_runs"] = [
        ((sched - anchor).total_seconds(), _seconds(lateness), _seconds(start_lag))
        for sched, lateness, start_lag in _sql(
            "SELECT scheduled_for, lateness, start_lag FROM jobs_jobrun WHERE tenant_id = %s"
            " ORDER BY scheduled_for", [b_id])
        if (sched - anchor).total_seconds() <= result["observed_until_s"] - 3
    ]  # fmt: skip
    (a_n, a_done, a_last_queued, a_last_finished, a_p50, a_p99, a_max) = _sql(
        # Lateness of the runs published while the bench watched (the others are unpublished).
        """SELECT count(*), count(*) FILTER (WHERE state = 'succeeded'),
                  extract(epoch FROM max(queued_at) - %s),
                  extract(epoch FROM max(finished_at) - %s),
                  percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
                  percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
                  max(extract(epoch FROM lateness))
             FROM jobs_jobrun WHERE tenant_id = %s""",
        [anchor, anchor, a_id],
    )[0]
    result.update({
        "a_runs": a_n, "a_succeeded": a_done, "a_claimed_within_s": float(a_last_queued),
        "a_drained_within_s": float(a_last_finished) if drained else None,
        "a_lateness_p50": float(a_p50), "a_lateness_p99": float(a_p99),
        "a_lateness_max": float(a_max),
        "a_started": _sql("SELECT count(*) FROM jobs_jobrun WHERE tenant_id = %s"
                          " AND started_at IS NOT NULL", [a_id])[0][0],
        "a_duplicate_attempts": _sql(
            "SELECT count(*) FROM jobs_runattempt a JOIN jobs_jobrun r ON r.id = a.run_id"
            " WHERE r.tenant_id = %s AND a.attempt > 1", [a_id])[0][0],
    })  # fmt: skip
    return result


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _span(b_runs: list[Any]) -> str:
    pub = [b[1] for b in b_runs if b[1] is not None]
    start = [b[2] for b in b_runs if b[2] is not None]
    unstarted = len(b_runs) - len(start)
    return (
        f"{len(b_runs)} / {_fmt(max(pub)) if pub else '-'} / {_fmt(max(start)) if start else '-'}"
        + (f" ({unstarted} not started)" if unstarted else "")
    )


def figures(r: dict[str, Any]) -> dict[str, str]:
    first = r["b_runs"][0]
    drained_s = r["a_drained_within_s"]
    during = [b for b in r["b_runs"][1:] if drained_s is None or b[0] <= drained_s]
    claims = [b for b in during if b[0] <= r["a_claimed_within_s"]]
    after = [b for b in during if b[0] > r["a_claimed_within_s"]]
    pub = [b[1] for b in during if b[1] is not None]
    start = [b[2] for b in during if b[2] is not None]
    depths = [d for _, d, _ in r["samples"]]
    memory = [m for _, _, m in r["samples"]]
    return {
        "tenant A: jobs due at the instant": f"{r['a_jobs']:,}",
        "broker queue bound (messages)": f"{r['bound']:,}" if r["bound"] else "none",
        "adaptive bound: target wait (s)": (
            f"{r.get('target_wait_s', 0):g}" if r.get("target_wait_s") else "off"
        ),
        "workers x processes": f"{r['workers']} x {r['concurrency']}",
        "B at the instant: published / started (s after due)":
            f"{_fmt(first[1])} / {_fmt(first[2])}",
        "B's later firings while A drained: count":  f"{len(during)}",
        "B's later firings while A drained: publish lateness max (s)":
            _fmt(max(pub)) if pub else "-",
        "B's later firings while A drained: start lateness max (s)":
            _fmt(max(start)) if start else "-",
        "B's firings while A was being claimed: count / publish max / start max (s)":
            _span(claims),
        "B's firings after A's claims, A still draining: count / publish max / start max (s)":
            _span(after),
        "A: all claimed within (s after due)": f"{r['a_claimed_within_s']:.1f}",
        "A: all finished within (s after due, drain time)": (
            f"{drained_s:.1f}" if drained_s is not None
            else f"not drained: watched for {r['observed_until_s']:.0f} s"
        ),
        "A: runs / started / succeeded / second attempts": (
            f"{r['a_runs']:,} / {r.get('a_started', r['a_runs']):,} / {r['a_succeeded']:,}"
            f" / {r['a_duplicate_attempts']}"
        ),
        "A: publish lateness p50 / p99 / max (s)": (
            f"{r['a_lateness_p50']:.1f} / {r['a_lateness_p99']:.1f} / {r['a_lateness_max']:.1f}"
        ),
        "broker depth max (messages)": f"{max(depths):,}",
        "Redis used_memory max (MiB)": f"{max(memory):.1f}",
    }  # fmt: skip


def write_docs(runs: list[tuple[dict[str, Any], str]]) -> None:
    body = (
        f"## {TITLE}\n\n"
        "Tenant A has its jobs due at one instant, tenant B one job due at the same instant "
        "(then every `b_interval_s`), B's job in the partition the horizon loads last; one beat "
        "node and real Celery workers (target `demo.heartbeat`), which A's burst saturates. "
        "Publish lateness is the run's `lateness` (due to the push into the broker), start "
        "lateness its `start_lag` (due to the worker's start), both on the database's clock. "
        "Measured on this 2-core machine shared with other work, embedded PostgreSQL and "
        "Redis. Regenerated by the command; not edited by hand.\n\n"
    )
    for r, command in runs:
        rows = "\n".join(f"| {k} | {v} |" for k, v in figures(r).items())
        b_runs = r["b_runs"]
        # The first minute, then one a minute, and the last.
        later = "\n".join(
            f"| {t:.0f} | {_fmt(p)} | {_fmt(s)} |"
            for i, (t, p, s) in enumerate(b_runs)
            if t < 60 or round(t) % 60 == 0 or i == len(b_runs) - 1
        )
        body += (
            f"Measured {r['measured_at']} UTC. Command: `{command}`\n\n"
            f"| figure | value |\n| --- | --- |\n{rows}\n\n"
            "B's firings (s after the instant, publish and start lateness in s; the first "
            "minute, then one a minute):\n\n"
            f"| due at | published | started |\n| ---: | ---: | ---: |\n{later}\n\n"
        )
    replace_section(TITLE, body)
    records = []
    for r, _command in runs:
        first = r["b_runs"][0]
        for name, value, unit in (
            ("b_publish_lateness", first[1], "s"), ("b_start_lateness", first[2], "s"),
            ("a_drain", r["a_drained_within_s"], "s"),
            ("b_later_start_lateness_max",
             max((b[2] for b in r["b_runs"][1:] if b[2] is not None), default=None), "s"),
            ("a_claimed", r["a_claimed_within_s"], "s"),
            ("redis_used_memory_max", max(m for _, _, m in r["samples"]), "MiB"),
        ):  # fmt: skip
            records.append({"source": SOURCE, "scheduler": "ours-1", "scenario": "burst",
                            "n": r["a_jobs"], "bound": r["bound"],
                            "target_wait_s": r.get("target_wait_s", 0), "metric": name,
                            "value": value, "unit": unit})  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--a-jobs", type=int, default=200_000)
    parser.add_argument("--b-interval-s", type=int, default=10)
    parser.add_argument("--bound", type=int, default=100_000)
    parser.add_argument("--target-wait-s", type=float, default=1.0)
    parser.add_argument(
        "--observe-s",
        type=float,
        default=0.0,
        help="stop this long after the instant, A drained or not (0: wait for A to drain)",
    )
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument(
        "--docs-from", type=Path, nargs="+", help="result.json files of earlier runs"
    )
    args = parser.parse_args()
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    if args.docs_from:
        saved = [json.loads(p.read_text()) for p in args.docs_from]
        write_docs([(s["result"], s["command"]) for s in saved])
        return 0
    services = _setup(LOG_DIR / "services")
    try:
        result = run(args)
    finally:
        services.stop()
    command = "python " + " ".join(sys.argv)
    out = LOG_DIR / f"result-{args.a_jobs}-{args.bound}-{args.target_wait_s:g}.json"
    out.write_text(json.dumps({"result": result, "command": command}))
    for t, published, started in result["b_runs"]:
        print(f"B due at +{t:6.0f}s  published {_fmt(published)} s  started {_fmt(started)} s")
    for key, value in figures(result).items():
        print(f"{key:64} {value}")
    print(f"result saved in {out}")
    if args.write_docs:
        write_docs([(result, command)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
