"""Backpressure: Redis memory through a spike of firings, with and without the broker bound
(run by hand).

    .venv/bin/python bench/bench_backpressure.py [--firings 1000000] [--bound 100000]
                                                 [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/backpressure-bench and, once with the
queue bound (SCHEDULER_BROKER_QUEUE_MAX_DEPTH=--bound) and once without (0), seeds
``--firings`` jobs due at one instant, runs one `manage.py beat_engine` node and no worker
(the worst case: nothing drains), and samples Redis's used_memory, the broker's depth and the
node's RSS every 0.25 s until every firing is claimed and the broker's depth has stopped
moving. Prints the peaks; with --write-docs it replaces the "## Backpressure: a spike with
no worker" section of docs/benchmarks.md and its records (source "bench-backpressure").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import _seed, _setup  # noqa: E402
from bench.bench_fairness import _broker, _depth, _spawn, _sql  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "Backpressure: a spike with no worker"
SOURCE = "bench-backpressure"
LOG_DIR = ROOT / ".local" / "backpressure-bench"


def scenario(firings: int, bound: int, timeout_s: float) -> dict[str, Any]:
    import psutil

    from beat_engine.clock import SystemClock
    from jobs.models import Tenant

    anchor = SystemClock().now() + timedelta(seconds=20 + firings // 50_000)
    _seed(firings, anchor=anchor, spread_ms=1, interval_s=86_400, prefix="bp-")
    Tenant.objects.filter(name="bench").update(max_queued_runs=firings + 10_000)
    client = _broker()
    base = int(client.info("memory")["used_memory"]) / 2**20
    env = {**os.environ, "SCHEDULER_BROKER_QUEUE_MAX_DEPTH": str(bound)}
    log = LOG_DIR / f"node-{bound}.log"
    log.write_text("")
    node = _spawn([sys.executable, "manage.py", "beat_engine", "--node-id", "bp"], log, env)
    samples: list[tuple[float, int, float, float]] = []
    claimed_at: float | None = None
    try:
        proc = psutil.Process(node.pid)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.25)
            now = (SystemClock().now() - anchor).total_seconds()
            samples.append((now, _depth(client),
                            int(client.info("memory")["used_memory"]) / 2**20,
                            proc.memory_info().rss / 2**20))  # fmt: skip
            if now < 0 or len(samples) % 8:
                continue
            if claimed_at is None:
                if _sql("SELECT count(*) FROM jobs_jobrun")[0][0] >= firings:
                    claimed_at = now
            elif now > claimed_at + 10 and samples[-1][1] == samples[-40][1]:
                break
        else:
            raise SystemExit("bench timed out before the spike was claimed")
    finally:
        node.terminate()
        node.wait(timeout=120)
    published = _sql("SELECT count(*) FROM jobs_jobrun WHERE published_at IS NOT NULL")[0][0]
    return {
        "firings": firings, "bound": bound, "claimed_within_s": claimed_at,
        "used_memory_before": base, "used_memory_max": max(s[2] for s in samples),
        "depth_max": max(s[1] for s in samples), "node_rss_max": max(s[3] for s in samples),
        "published": published, "samples": samples[::8],
    }  # fmt: skip


def figures(runs: list[dict[str, Any]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in runs:
        name = f"bound {r['bound']:,}" if r["bound"] else "no bound"
        out[f"{name}: firings claimed within (s after due)"] = f"{r['claimed_within_s']:.1f}"
        out[f"{name}: broker depth max (messages)"] = f"{r['depth_max']:,}"
        out[f"{name}: runs marked published / queued and unpublished in PostgreSQL"] = (
            f"{r['published']:,} / {r['firings'] - r['published']:,}"
        )
        out[f"{name}: Redis used_memory before / max (MiB)"] = (
            f"{r['used_memory_before']:.1f} / {r['used_memory_max']:.1f}"
        )
        out[f"{name}: beat node RSS max (MiB)"] = f"{r['node_rss_max']:.0f}"
    return out


def write_docs(runs: list[dict[str, Any]], command: str, measured_at: str) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures(runs).items())
    body = (
        f"## {TITLE}\n\n"
        f"Measured {measured_at} UTC on this 2-core machine (shared with other work), "
        "embedded PostgreSQL and Redis, one beat node, no worker: every firing of the spike is "
        "due at one instant and nothing drains the queue. With the bound the node stops "
        "pushing at the bound and holds the rest, queued in PostgreSQL, in memory (its RSS); "
        "without it every message goes into Redis. Regenerated by the command; not edited by "
        f"hand.\nCommand: `{command}`\n\n| figure | value |\n| --- | --- |\n{rows}\n"
    )
    replace_section(TITLE, body)
    records = []
    for r in runs:
        for metric, value, unit in (
            ("used_memory_max", r["used_memory_max"], "MiB"),
            ("depth_max", r["depth_max"], "messages"),
            ("node_rss_max", r["node_rss_max"], "MiB"),
            ("claimed_within", r["claimed_within_s"], "s"),
        ):
            records.append({"source": SOURCE, "scheduler": "ours-1", "scenario": "spike",
                            "n": r["firings"], "bound": r["bound"], "metric": metric,
                            "value": value, "unit": unit})  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--firings", type=int, default=1_000_000)
    parser.add_argument("--bound", type=int, default=100_000)
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--docs-from", type=Path, help="a result.json of an earlier run")
    args = parser.parse_args()
    # What is measured is the fixed bound (--bound) against none: not one sized from the drain
    # rate of a queue no worker reads (docs/limits.md, "The adaptive bound").
    os.environ.setdefault("SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", "0")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    command = "python " + " ".join(sys.argv)
    if args.docs_from:
        saved = json.loads(args.docs_from.read_text())
        write_docs(saved["runs"], saved["command"], saved["measured_at"])
        return 0
    measured_at = f"{datetime.now(UTC):%Y-%m-%d %H:%M}"
    services = _setup(LOG_DIR / "services")
    try:
        runs = [scenario(args.firings, bound, args.timeout_s) for bound in (args.bound, 0)]
    finally:
        services.stop()
    out = LOG_DIR / "result.json"
    out.write_text(json.dumps({"runs": runs, "command": command, "measured_at": measured_at}))
    for key, value in figures(runs).items():
        print(f"{key:64} {value}")
    if args.write_docs:
        write_docs(runs, command, measured_at)
    return 0


if __name__ == "__main__":
    sys.exit(main())
