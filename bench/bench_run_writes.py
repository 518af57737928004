"""PostgreSQL CPU per executed run, read from the one backend that serves the executor.

Run manually (not in CI):  .venv/bin/python bench/bench_run_writes.py [--runs 2000]

Runs the executor's task body (``jobs.execution.run_delivery``, a no-op target) in this process,
one queued run after another, with the worker's generic plans (jobs/prepared.py) and the day
partitions of a deployment's hot window (bench/bench_executor.py). Before and after, it reads
the CPU time of the PostgreSQL backend serving this process from /proc, and prints it per run
with this process's own CPU and wall time. One backend's CPU time moves far less with the
host's load than the CPU of every process that bench/bench_costs.py adds up, so a change to
what the worker's statements cost PostgreSQL shows here when it would drown there. Compare two
trees by running this from each (``git worktree add``), alternately, several times; with
``--wait-s`` it prints the backend's pid first, for a profiler to attach to.

Uses DATABASE_URL/REDIS_URL when both are set (the backend must then run on this machine),
else starts embedded servers in .local/run-writes-bench. Prints only.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_executor import _hot_window_partitions, _services, noop_job, queued_runs  # noqa: E402

# Runs executed before the measured ones: the connection's statements prepared and planned.
WARM_UP = 200


def _cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` (fields 14 and 15 of /proc/pid/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(runs: int, wait_s: float = 0.0) -> dict[str, float]:
    from django.db import connection

    from jobs import result_writer
    from jobs.execution import run_delivery
    from jobs.models import Tenant
    from jobs.prepared import install_generic_plans
    from jobs.tasks import _clock

    partitions = _hot_window_partitions()
    install_generic_plans()
    now = datetime.now(UTC)
    tenant, _ = Tenant.objects.get_or_create(name="bench", defaults={"created_at": now})
    job = noop_job(tenant, f"run-writes-{now.timestamp()}", now)
    ids = [str(row.id) for row in queued_runs(job, runs + WARM_UP, now)]
    # A new session, so that it starts with the generic plans, as a worker's does.
    connection.close()
    for run_id in ids[:WARM_UP]:
        run_delivery(run_id, 1, clock=_clock)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = int(cursor.fetchone()[0])
    if wait_s:
        print(f"backend pid {backend}; measured runs start in {wait_s:g} s", flush=True)
        time.sleep(wait_s)
    backend_0, wall_0, own_0 = _cpu_s(backend), time.perf_counter(), time.process_time()
    for run_id in ids[WARM_UP:]:
        outcome = run_delivery(run_id, 1, clock=_clock)
        if outcome != "succeeded":
            raise SystemExit(f"run {run_id}: {outcome}")
    backend_1, wall_1, own_1 = _cpu_s(backend), time.perf_counter(), time.process_time()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        if int(cursor.fetchone()[0]) != backend:
            raise SystemExit("the connection changed during the measurement")
    # The runs' results are stored off the run, by a writer thread; written now, while the
    # servers are up, not at exit after they stopped.
    result_writer.flush()
    return {
        "runs": runs,
        "day_partitions": partitions,
        "backend_cpu_ms_per_run": 1000 * (backend_1 - backend_0) / runs,
        "client_cpu_ms_per_run": 1000 * (own_1 - own_0) / runs,
        "wall_ms_per_run": 1000 * (wall_1 - wall_0) / runs,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument(
        "--wait-s",
        type=float,
        default=0.0,
        help="print the backend's pid and wait this long before the measured runs, to attach "
        "a profiler to it (perf record -p PID)",
    )
    args = parser.parse_args()
    services = _services("run-writes-bench")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    os.environ["SCHEDULER_CLIENT_MODULES"] = "scheduler_project.demo,bench.bench_tasks"
    os.environ["LOG_LEVEL"] = "WARNING"
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        figures = measure(args.runs, args.wait_s)
    finally:
        if services is not None:
            # The executor's cancel watch (a daemon thread on Redis) would log its reconnects.
            logging.disable(logging.WARNING)
            services.stop()
    print(
        f"{figures['runs']:.0f} runs, {figures['day_partitions']:.0f} day partitions: "
        f"PostgreSQL backend CPU {figures['backend_cpu_ms_per_run']:.3f} ms/run, "
        f"client CPU {figures['client_cpu_ms_per_run']:.3f} ms/run, "
        f"wall {figures['wall_ms_per_run']:.3f} ms/run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
