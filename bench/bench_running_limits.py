"""What a running limit costs the start and the outcome statements, measured in one process.

Run manually (not in CI):  .venv/bin/python bench/bench_running_limits.py [--runs 1000] [--reps 5]
Uses DATABASE_URL when set, else starts embedded servers in .local/bench-limits.

For each case, ``--runs`` queued runs are started (run_start) and succeeded (run_succeed) one
after another on one connection, as a worker does, with no broker and no target, so the figure
is the statements' own time; the cases alternate within each repetition, so a change in the
host's load shows in every case alike. Cases: a tenant with no limit (the one-statement start),
a tenant whose limit is far above what runs (every start takes the tenant's lock and counts),
and a tenant at its limit of one with a second run waiting (each outcome releases it, each
start parks the next). Prints microseconds per run: median and range over the repetitions.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _services() -> Any:
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return None
    from scheduler_project.embedded import EmbeddedServices

    services = EmbeddedServices(ROOT / ".local" / "bench-limits")
    os.environ.update(services.start())
    return services


def _queued(job: Any, count: int, base: datetime, now: datetime) -> list[Any]:
    from jobs.models import JobRun
    from jobs.services.dedup import dedup_key_for
    from jobs.states import RunState

    rows = [
        JobRun(
            job=job, tenant_id=job.tenant_id, partition=job.partition, scheduled_for=at,
            state=RunState.QUEUED, attempt=1, queued_at=now, dedup_key=dedup_key_for(job.id, at),
            created_at=now,
        )
        for at in (base + timedelta(microseconds=i) for i in range(count))
    ]  # fmt: skip
    JobRun.objects.bulk_create(rows, batch_size=1000)
    return rows


def _job(name: str, limit: int | None, now: datetime) -> Any:
    from jobs.models import Tenant
    from jobs.services.jobs import JobInput, job_create

    tenant = Tenant.objects.create(name=name, created_at=now)
    if limit is not None:
        Tenant.objects.filter(id=tenant.id).update(max_running_runs=limit)
    return job_create(
        tenant=tenant,
        data=JobInput(
            name=name, target_kind="callable", target_name="demo.heartbeat", cron="* * * * *"
        ),
        now=now,
    )


def _start_and_finish(runs: list[Any], now: datetime) -> float:
    """Seconds per run for the start and the outcome of each run, in firing order."""
    from jobs.services.runs import run_succeed
    from jobs.services.starts import run_start

    began = time.perf_counter()
    for run in runs:
        run_start(run_id=run.id, attempt=1, worker="bench", now=now)
        run_succeed(run_id=run.id, attempt=1, now=now, record_key=False)
    return (time.perf_counter() - began) / len(runs)


def _at_limit(job: Any, count: int, base: datetime, now: datetime) -> float:
    """Limit 1, always one run waiting: each outcome releases it and the timer-less loop starts
    it as the engine's timer would have queued it (attempt 1 again), so every start of a new
    run parks and every outcome releases."""
    from jobs.models import JobRun
    from jobs.services.runs import run_succeed
    from jobs.services.starts import StartOutcome, run_start
    from jobs.states import RunState

    runs = _queued(job, count, base, now)
    began = time.perf_counter()
    first = run_start(run_id=runs[0].id, attempt=1, worker="bench", now=now)
    assert first.outcome == StartOutcome.STARTED
    for previous, run in itertools.pairwise(runs):
        held = run_start(run_id=run.id, attempt=1, worker="bench", now=now)
        assert held.outcome == StartOutcome.HELD, held
        run_succeed(run_id=previous.id, attempt=1, now=now, record_key=False)
        # What the timer does with the released run.
        JobRun.objects.filter(id=run.id, state=RunState.RETRY_WAIT).update(
            state=RunState.QUEUED, attempt=1
        )
        started = run_start(run_id=run.id, attempt=1, worker="bench", now=now)
        assert started.outcome == StartOutcome.STARTED, started
    run_succeed(run_id=runs[-1].id, attempt=1, now=now, record_key=False)
    return (time.perf_counter() - began) / count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument(
        "--unlimited-only",
        action="store_true",
        help="only the case without a limit, so the same script times a tree without limits",
    )
    args = parser.parse_args()
    services = _services()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    os.environ["LOG_LEVEL"] = "WARNING"
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        now = datetime.now(UTC)
        stamp = int(now.timestamp())
        cases: dict[str, list[float]] = {"no limit": []}
        jobs = {"no limit": _job(f"bench-free-{stamp}", None, now)}
        if not args.unlimited_only:
            cases.update({"limit far above": [], "at limit 1": []})
            jobs["limit far above"] = _job(f"bench-far-{stamp}", 1000, now)
            jobs["at limit 1"] = _job(f"bench-one-{stamp}", 1, now)
        _start_and_finish(_queued(jobs["no limit"], 100, now, now), now)  # warm-up
        for rep in range(args.reps):
            base = now + timedelta(days=rep + 1)
            for name in ("no limit", "limit far above"):
                if name in jobs:
                    runs = _queued(jobs[name], args.runs, base, now)
                    cases[name].append(_start_and_finish(runs, now))
            if "at limit 1" in jobs:
                cases["at limit 1"].append(_at_limit(jobs["at limit 1"], args.runs, base, now))
        for name, values in cases.items():
            micros = sorted(v * 1e6 for v in values)
            print(
                f"{name:16s} start + outcome {statistics.median(micros):7.0f} µs/run "
                f"(range {micros[0]:.0f}-{micros[-1]:.0f}, {args.reps} x {args.runs} runs)"
            )
    finally:
        if services is not None:
            services.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
