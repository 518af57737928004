"""Backlog benchmark: many queued runs, workers stopped, then Redis flushed, then workers back.

    .venv/bin/python bench/bench_backlog.py [--runs 50000] [--outage-s 600] [--sample-s 30]
                                            [--no-flush] [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/backlog-bench, one real beat node
(`manage.py beat_engine`, default settings: the sweep every 2 s, republish_after_s 60 s) and
no worker. ``--runs`` jobs fall due at once; while no worker runs for ``--outage-s`` it samples
the messages in the broker and Redis's used_memory every ``--sample-s``. Then it flushes
Redis (every message lost) and times the re-send, starts two worker processes and waits for
every run to finish, and counts attempts and successes in PostgreSQL. Prints the figures; with
--write-docs it replaces the "## Backlog: workers stopped" section of docs/benchmarks.md and
its records (source "bench-backlog") in docs/benchmarks.json.
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

from beat_engine.priority_order import BROKER_STEPS  # noqa: E402
from bench.bench_engine import _seed, _setup  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "Backlog: workers stopped"
SOURCE = "bench-backlog"
QUEUES = ["scheduler", *(f"scheduler\x06\x16{step}" for step in BROKER_STEPS if step)]
LOG_DIR = ROOT / ".local" / "backlog-bench"


def _broker() -> Any:
    import redis
    from django.conf import settings

    return redis.Redis.from_url(settings.REDIS_URL)


def _messages(client: Any) -> int:
    """Messages waiting in the queue's lists plus those reserved by workers (unacked)."""
    pipe = client.pipeline(transaction=False)
    for queue in QUEUES:
        pipe.llen(queue)
    pipe.hlen("unacked")
    return sum(int(n) for n in pipe.execute())


def _used_memory_mib(client: Any) -> float:
    return int(client.info("memory")["used_memory"]) / 2**20


def _count(sql: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql)
        return int(cursor.fetchone()[0])


def _events(log: Path, name: str) -> tuple[int, int]:
    """How many ``name`` lines the node logged, and the sum of their ``runs``."""
    lines = runs = 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and f'"{name}"' in line:
            event = json.loads(line)
            if event.get("event") == name:
                lines += 1
                runs += int(event.get("runs", 0))
    return lines, runs


def _sweep_plan() -> str:
    """EXPLAIN ANALYZE of the sweep's query over every partition, its cutoff moved to now so
    that every waiting run matches (the node's own cutoff matches only the runs not looked
    at within the last republish_after_s)."""
    from django.db import connection

    from beat_engine.clock import SystemClock
    from beat_engine.config import EngineConfig
    from beat_engine.sweep import SWEEP_SQL, sweep_params

    config = EngineConfig.from_settings(node_id="plan")
    params = sweep_params(
        range(config.partitions),
        now=SystemClock().now(),
        unpublished_after=timedelta(seconds=config.publish_sweep_after_s),
        republish_after=timedelta(0),
        limit=config.claim_batch,
    )
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, COSTS OFF, TIMING ON) " + SWEEP_SQL, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, cwd=ROOT, env=dict(os.environ), stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip


def _wait(predicate: Any, timeout_s: float, what: str) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise SystemExit(f"bench timed out waiting for {what}")
        time.sleep(0.2)
    return time.monotonic() - start


def run(runs: int, outage_s: float, sample_s: float, flush: bool) -> dict[str, Any]:
    from beat_engine.clock import SystemClock

    anchor = SystemClock().now() + timedelta(seconds=10)
    _seed(runs, anchor=anchor, spread_ms=1, interval_s=86_400, prefix="backlog-")
    client = _broker()
    node_log = LOG_DIR / "node.log"
    node_log.write_text("")
    node = _spawn([sys.executable, "manage.py", "beat_engine", "--node-id", "backlog"], node_log)
    workers: subprocess.Popen[bytes] | None = None
    result: dict[str, Any] = {
        "runs": runs, "outage_s": outage_s, "sample_s": sample_s,
        "measured_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M}",
    }  # fmt: skip
    try:
        published = "SELECT count(*) FROM jobs_jobrun WHERE published_at IS NOT NULL"
        _wait(lambda: _count(published) >= runs, 120, "every run sent")
        result["sent_within_s"] = (SystemClock().now() - anchor).total_seconds()
        samples: list[tuple[float, int, float]] = []
        start = time.monotonic()
        for k in range(int(outage_s // sample_s) + 1):
            time.sleep(max(0.0, start + k * sample_s - time.monotonic()))
            samples.append((time.monotonic() - start, _messages(client), _used_memory_mib(client)))
            if result.get("plan") is None and samples[-1][0] >= 70:
                result["plan"] = _sweep_plan()
        time.sleep(max(0.0, start + outage_s - time.monotonic()))
        result["samples"] = samples
        result["republished_outage"] = _events(node_log, "beat.republish")[1]
        checks, rechecked = _events(node_log, "beat.still_waiting")
        result["rechecked_outage"] = rechecked
        result["rechecks_outage"] = checks
        if flush:
            client.flushall()
            result["resend_s"] = _wait(lambda: _messages(client) >= runs, 600, "the re-send")
            result["messages_after_resend"] = _messages(client)
            result["republished_total"] = _events(node_log, "beat.republish")[1]
        worker_log = LOG_DIR / "worker.log"
        worker_log.write_text("")
        workers = _spawn(
            [sys.executable, "-m", "celery", "-A", "scheduler_project", "worker", "--pool",
             "prefork", "--concurrency", "2", "-Q", "scheduler", "--loglevel", "WARNING",
             "--without-mingle", "--without-gossip", "--without-heartbeat"],
            worker_log,
        )  # fmt: skip
        unfinished = "SELECT count(*) FROM jobs_jobrun WHERE finished_at IS NULL"
        result["drain_s"] = _wait(lambda: _count(unfinished) == 0, 3600, "every run to finish")
        # The node and the workers are still up: any message left would be a duplicate.
        time.sleep(5)
        result["messages_left"] = _messages(client)
    finally:
        for proc in (node, workers):
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in (node, workers):
            if proc is not None:
                proc.wait(timeout=60)
    result["runs_succeeded"] = _count("SELECT count(*) FROM jobs_jobrun WHERE state = 'succeeded'")
    result["attempts"] = _count("SELECT count(*) FROM jobs_runattempt")
    result["attempts_succeeded"] = _count(
        "SELECT count(*) FROM jobs_runattempt WHERE outcome = 'succeeded'"
    )
    result["runs_with_two_attempts"] = _count(
        "SELECT count(*) FROM (SELECT run_id FROM jobs_runattempt GROUP BY run_id"
        " HAVING count(*) > 1) twice"
    )
    result["runs_not_attempt_1"] = _count("SELECT count(*) FROM jobs_jobrun WHERE attempt <> 1")
    return result


def figures(r: dict[str, Any]) -> dict[str, str]:
    samples = r["samples"]
    counts = [c for _, c, _ in samples]
    memory = [m for _, _, m in samples]
    out = {
        "queued runs (one firing each, due at once)": f"{r['runs']:,}",
        "all sent (s after due)": f"{r['sent_within_s']:.2f}",
        "workers stopped for (s)": f"{r['outage_s']:.0f}",
        "broker messages during the outage, min / max": f"{min(counts):,} / {max(counts):,}",
        "Redis used_memory during the outage, first / max / last (MiB)":
            f"{memory[0]:.2f} / {max(memory):.2f} / {memory[-1]:.2f}",
        "runs sent again during the outage": f"{r['republished_outage']:,}",
        "runs found still waiting and re-stamped (sweep batches)":
            f"{r['rechecked_outage']:,} ({r['rechecks_outage']:,})",
    }  # fmt: skip
    if "resend_s" in r:
        out["Redis flushed: all runs sent again within (s)"] = f"{r['resend_s']:.1f}"
        out["messages after the re-send"] = f"{r['messages_after_resend']:,}"
    out.update({
        "workers (2 processes) ran every run within (s)": f"{r['drain_s']:.1f}",
        "runs succeeded / attempts / successful attempts":
            f"{r['runs_succeeded']:,} / {r['attempts']:,} / {r['attempts_succeeded']:,}",
        "runs with more than one attempt / not at attempt 1":
            f"{r['runs_with_two_attempts']} / {r['runs_not_attempt_1']}",
        "messages left in the broker after the drain": f"{r['messages_left']:,}",
    })  # fmt: skip
    return out


def write_docs(r: dict[str, Any], command: str) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures(r).items())
    minute = max(1, round(60 / r["sample_s"]))
    sampled = "\n".join(
        f"| {t:.0f} | {c:,} | {m:.2f} |" for i, (t, c, m) in enumerate(r["samples"])
        if i % minute == 0 or i == len(r["samples"]) - 1
    )  # fmt: skip
    body = (
        f"## {TITLE}\n\n"
        f"Measured {r['measured_at']} UTC on this 2-core machine (shared with "
        "other work), embedded PostgreSQL and Redis, one beat node with the default settings "
        "(sweep every 2 s, `republish_after_s` 60 s). Regenerated by the command; not edited "
        f"by hand.\nCommand: `{command}`\n\n"
        "No worker runs while the runs wait: the sweep looks at each waiting run once a "
        "minute, finds its message still in the broker and re-stamps it instead of sending it "
        'again (docs/engine.md, "Sweep: sending again only what the broker lost"). Before '
        "that change every waiting run got a new message every 60 s. Then Redis is flushed, "
        "losing every message, and the runs are sent again; then two worker processes run "
        "them, and PostgreSQL counts the attempts and successes.\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n\n"
        "Broker messages and Redis memory while the workers were stopped (every minute):\n\n"
        f"| s since all sent | messages | used_memory (MiB) |\n| ---: | ---: | ---: |\n{sampled}\n"
    )
    if r.get("plan"):
        body += (
            "\nThe sweep's query during the outage, over every partition, its cutoff moved to "
            "now so that all the waiting runs match (`EXPLAIN ANALYZE`):\n\n"
            f"```\n{r['plan']}\n```\n"
        )
    replace_section(TITLE, body)
    counts = [c for _, c, _ in r["samples"]]
    memory = [m for _, _, m in r["samples"]]
    metrics: list[tuple[str, float, str]] = [
        ("messages_outage_min", min(counts), "messages"),
        ("messages_outage_max", max(counts), "messages"),
        ("used_memory_outage_first", memory[0], "MiB"),
        ("used_memory_outage_max", max(memory), "MiB"),
        ("used_memory_outage_last", memory[-1], "MiB"),
        ("republished_outage", r["republished_outage"], "runs"),
        ("drain", r["drain_s"], "s"),
        ("attempts", r["attempts"], "attempts"),
        ("runs_with_two_attempts", r["runs_with_two_attempts"], "runs"),
        ("messages_left", r["messages_left"], "messages"),
    ]
    if "resend_s" in r:
        metrics.append(("resend_after_flush", r["resend_s"], "s"))
    records = [
        {"source": SOURCE, "scheduler": "ours-1", "scenario": "backlog", "n": r["runs"],
         "outage_s": r["outage_s"], "metric": name, "value": value, "unit": unit}
        for name, value, unit in metrics
    ]  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50_000)
    parser.add_argument("--outage-s", type=float, default=600.0)
    parser.add_argument("--sample-s", type=float, default=30.0)
    parser.add_argument("--no-flush", action="store_true")
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--docs-from", type=Path, help="a result.json of an earlier run")
    args = parser.parse_args()
    # The workers are stopped for most of the run and every message is counted: the fixed
    # queue bound, not one sized from a drain rate of zero (docs/limits.md, "The adaptive bound").
    os.environ.setdefault("SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", "0")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    if args.docs_from:
        saved = json.loads(args.docs_from.read_text())
        write_docs(saved["result"], saved["command"])
        return 0
    services = _setup(LOG_DIR / "services")
    try:
        result = run(args.runs, args.outage_s, args.sample_s, flush=not args.no_flush)
    finally:
        services.stop()
    command = "python " + " ".join(sys.argv)
    (LOG_DIR / "result.json").write_text(json.dumps({"result": result, "command": command}))
    for t, count, memory in result["samples"]:
        print(f"t={t:6.0f}s messages={count:8,} used_memory={memory:8.1f} MiB")
    for key, value in figures(result).items():
        print(f"{key:70} {value}")
    print(result.get("plan") or "(no sweep plan: the outage was shorter than 70 s)")
    if args.write_docs:
        write_docs(result, command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
