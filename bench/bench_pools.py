"""Worker pools for I/O-bound targets: runs/s one worker process completes with HTTP-target runs
whose target answers after a fixed delay, under the prefork, threads and gevent pools.

Run manually (not in CI):  .venv/bin/python bench/bench_pools.py [--runs 1000]
    [--delays-ms 50,500] [--repeat 2] [--quick]
Uses DATABASE_URL/REDIS_URL when both are set, else starts embedded servers in .local/bench.
The target is bench/compare/http_target.py on 127.0.0.1 (a thread per request, so it never
queues a call). Each configuration gets the same runs, all published before the timing ends;
time = first publish to the last run's success. The configurations alternate, ``--repeat``
rounds of each, so that the shared host's noise falls on all of them. Prints the figures and
rewrites the "## Worker pools" section of docs/benchmarks.md and its records in
docs/benchmarks.json (not with --quick, which runs 300 runs once and only prints).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_executor import _services, _wait, _worker, http_job, queued_runs  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

# (pool, concurrency): prefork at the process count a 2-core host runs without thrashing, the
# in-process pools at what one process serves.
CONFIGS = (("prefork", 8), ("threads", 32), ("gevent", 100))


def _target(delay_ms: int, ledger: Path) -> tuple[subprocess.Popen[bytes], int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.compare.http_target", str(ledger), str(delay_ms / 1000)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline().decode().strip())
    return proc, port


def _round(runs: int, url: str) -> float:
    from jobs.models import JobRun, Tenant
    from jobs.states import RunState
    from scheduler_project.celery import app

    now = datetime.now(UTC)
    tenant, _ = Tenant.objects.get_or_create(name="bench", defaults={"created_at": now})
    job = http_job(tenant, f"pools-{now.timestamp()}", url, now, firing="pools")
    rows = queued_runs(job, runs, now)
    started = time.monotonic()
    with app.producer_or_acquire() as producer:
        for row in rows:
            app.send_task("jobs.execute_run", args=[str(row.id), 1], queue="bench",
                          producer=producer)  # fmt: skip
    finished = JobRun.objects.filter(job=job, state=RunState.SUCCEEDED)
    _wait(lambda: finished.count() == runs)
    elapsed = time.monotonic() - started
    failed = JobRun.objects.filter(job=job).exclude(state=RunState.SUCCEEDED).count()
    if failed:
        raise SystemExit(f"{failed} runs did not succeed")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=None, help="default 1000, 300 with --quick")
    parser.add_argument(
        "--delays-ms", default="50,500", help="the target's delays, comma-separated (50,500)"
    )
    parser.add_argument("--repeat", type=int, default=2, help="rounds of each pool (2)")
    parser.add_argument("--quick", action="store_true", help="300 runs, once, prints only")
    args = parser.parse_args()
    runs = args.runs or (300 if args.quick else 1000)
    repeat = 1 if args.quick else args.repeat
    try:
        delays = [int(d) for d in args.delays_ms.split(",")]
    except ValueError:
        parser.error(f"--delays-ms: not a comma-separated list of integers: {args.delays_ms!r}")
    if runs < 1 or repeat < 1 or not delays or min(delays) < 1:
        parser.error("--runs and --repeat must be at least 1, each of --delays-ms at least 1")
    services = _services()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    os.environ["PYTHONPATH"] = str(ROOT)
    os.environ["LOG_LEVEL"] = "WARNING"
    seconds: dict[tuple[int, str, int], list[float]] = {}
    try:
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        log = ROOT / ".local" / "bench-worker.log"
        for delay_ms in delays:
            target, port = _target(delay_ms, ROOT / ".local" / "bench-pools-ledger.jsonl")
            url = f"http://127.0.0.1:{port}/"
            env = {**os.environ, "SCHEDULER_HTTP_ALLOWLIST": f"127.0.0.1:{port}"}
            # This process validates the job's URL too, with the settings loaded already.
            settings.SCHEDULER["HTTP_ALLOWLIST"] = [f"127.0.0.1:{port}"]
            try:
                for _ in range(repeat):
                    for pool, concurrency in CONFIGS:
                        times = seconds.setdefault((delay_ms, pool, concurrency), [])
                        worker = _worker(env, log, pool, concurrency)
                        try:
                            # Warm-up: the worker is up and has imported everything.
                            _round(20, url)
                            times.append(_round(runs, url))
                        finally:
                            os.killpg(worker.pid, 15)
                            worker.wait()
                        print(f"{delay_ms} ms, {pool} x {concurrency}: "
                              f"{runs / times[-1]:,.0f} runs/s", flush=True)  # fmt: skip
            finally:
                os.killpg(target.pid, 15)
                target.wait()
    finally:
        if services is not None:
            services.stop()
    if args.quick:
        return 0
    _write(runs, repeat, seconds)
    return 0


def _write(runs: int, repeat: int, seconds: dict[tuple[int, str, int], list[float]]) -> None:
    rows = []
    records: list[dict[str, Any]] = []
    for (delay_ms, pool, concurrency), times in seconds.items():
        rates = [runs / s for s in times]
        rate = statistics.median(rates)
        bound = concurrency * 1000 / delay_ms
        spread = f"{min(rates):,.0f}-{max(rates):,.0f}"
        rows.append(
            f"| {delay_ms} | {pool} | {concurrency} | {rate:,.0f} ({spread}) | {bound:,.0f} "
            f"| {rate / bound:.0%} |"
        )
        records.append(
            {
                "source": "bench_pools",
                "pool": pool,
                "concurrency": concurrency,
                "runs": runs,
                "delay_ms": delay_ms,
                "runs_per_s": [round(r, 1) for r in rates],
            }
        )
    delays = ",".join(str(d) for d in sorted({key[0] for key in seconds}))
    section = (
        "## Worker pools\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python bench/bench_pools.py "
        f"--runs {runs} --delays-ms {delays} --repeat {repeat}`: one worker process (its pool "
        f"children under prefork) runs {runs:,} HTTP-target runs, each a POST to a local target "
        "(`bench/compare/http_target.py`, 127.0.0.1) that answers after the delay; "
        "embedded PostgreSQL and Redis on Unix sockets, 2 shared cores; time = first publish "
        f"to the last success; median of {repeat} alternating rounds (min-max). *Bound* is what "
        "the concurrency allows if only the target's delay counted (concurrency / delay).\n\n"
        "| target delay (ms) | pool | concurrency | runs/s | bound (runs/s) | of the bound |\n"
        "| ---: | --- | ---: | ---: | ---: | ---: |\n" + "\n".join(rows) + "\n\n"
        "Prefork's processes each wait out the target's delay; the threads and gevent pools "
        "wait for many targets in one process. Every run still makes its two statements (the "
        "start and the outcome compare-and-sets) and its Celery message, and under gevent "
        "borrows a connection from the process's pool for each (docs/execution.md, \"Worker "
        'pools"): with a short delay that work, on the 2 cores that also run PostgreSQL and '
        "Redis, is the limit, not the target or the pool.\n\n"
        "History (2026-12-02, this bench, same command): before the broker's wait was cut "
        "into 50 ms pieces (scheduler_project/broker_priority.py, DrainBoundMixin), gevent x "
        "100 at 500 ms did 39 (36-41) runs/s, its prefetch of 100 runs in waves a second "
        "apart; the other rows were the same within the noise.\n"
    )
    print(section)
    replace_section("Worker pools", section)
    replace_records("bench_pools", records)


if __name__ == "__main__":
    sys.exit(main())
