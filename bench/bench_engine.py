"""Beat engine benchmark: midnight spike, steady rate, 1M registered jobs (run by hand).

    .venv/bin/python bench/bench_engine.py [--spike 50000] [--steady-rate 1000 --steady-s 30]
                                           [--registered 1000000] [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/engine-bench. Prints figures and, with
--write-docs, replaces the "## Beat engine" section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scheduler_project.embedded import EmbeddedServices  # noqa: E402

SEED_SQL = """
INSERT INTO jobs_job (id, tenant_id, name, description, source, kind, cron_expression,
    interval_seconds, anchor_at, timezone, target_kind, target_name, target_url, target_headers,
    payload, queue, priority, status, status_reason, next_fire_at, partition, max_attempts,
    retry_base_delay, retry_max_delay, retry_jitter, retry_on_client_error, timeout,
    concurrency_policy, catchup_policy, catchup_limit, jitter_window, critical, version,
    idempotency_key, request_hash, created_at, updated_at)
SELECT gen_random_uuid(), %(tenant)s, %(prefix)s || i, '', 'api', 'interval', '',
       %(interval)s, %(anchor)s::timestamptz + (i %% %(spread)s) * interval '1 millisecond',
       'UTC', 'callable', 'demo.heartbeat', '', '{}', '{}', 'scheduler', 5, 'active', '',
       %(anchor)s::timestamptz + (i %% %(spread)s) * interval '1 millisecond', i %% 64, 3,
       interval '10 seconds', interval '10 minutes', true, false, interval '5 minutes',
       'allow', 'skip', 100, interval '0', false, 1, '', '', %(anchor)s, %(anchor)s
  FROM generate_series(1, %(count)s) AS i
"""


def _setup(services_dir: Path) -> EmbeddedServices:
    services = EmbeddedServices(services_dir)
    env = services.start()
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if os.environ.get("BENCH_LOG"):
        # The engine's JSON lines (with their fields) to a file, to explain an outlier.
        import logging

        from beat_engine.runtime import JsonLineFormatter

        handler = logging.FileHandler(os.environ["BENCH_LOG"])
        handler.setFormatter(JsonLineFormatter())
        engine_logger = logging.getLogger("beat_engine")
        engine_logger.addHandler(handler)
        engine_logger.propagate = False
    return services


def _reset() -> int:
    from django.db import connection

    from jobs.models import Tenant

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE jobs_deadletter, jobs_runattempt, jobs_dedupkey, jobs_jobrun, jobs_job,"
            " jobs_partitionepoch CASCADE"
        )
    import redis
    from django.conf import settings

    redis.Redis.from_url(settings.REDIS_URL).flushall()
    tenant, _ = Tenant.objects.get_or_create(
        name="bench", defaults={"created_at": datetime.now(UTC)}
    )
    return tenant.id


def _seed(count: int, *, anchor: datetime, spread_ms: int, interval_s: int, prefix: str) -> None:
    from django.db import connection

    tenant = _reset()
    with connection.cursor() as cursor:
        cursor.execute(
            SEED_SQL,
            {"tenant": tenant, "prefix": prefix, "interval": interval_s, "anchor": anchor,
             "spread": max(1, spread_ms), "count": count},
        )  # fmt: skip
        cursor.execute("ANALYZE jobs_job")


def _engine(node: str = "bench-1"):  # type: ignore[no-untyped-def]
    from beat_engine.clock import SystemClock
    from beat_engine.config import EngineConfig
    from beat_engine.runtime import build_engine

    config = EngineConfig.from_settings(node_id=node)
    return build_engine(config, clock=SystemClock())


def _lateness(since: datetime) -> tuple[int, float, float, float, datetime | None]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*),
                   percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
                   percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
                   max(extract(epoch FROM lateness)), max(published_at)
              FROM jobs_jobrun WHERE published_at IS NOT NULL AND scheduled_for >= %s
            """,
            [since],
        )
        n, p50, p99, worst, last = cursor.fetchone()
    return int(n), float(p50 or 0), float(p99 or 0), float(worst or 0), last


def _print_outliers(since: datetime) -> None:
    """The slowest runs, split into claim delay and publish delay: where lateness came from."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT partition, scheduled_for, extract(epoch FROM queued_at - due_at),
                   extract(epoch FROM published_at - queued_at), extract(epoch FROM lateness),
                   trigger, epoch
              FROM jobs_jobrun WHERE published_at IS NOT NULL AND scheduled_for >= %s
             ORDER BY lateness DESC LIMIT 8
            """,
            [since],
        )
        for row in cursor.fetchall():
            print(
                "outlier partition/scheduled/claim-delay/publish-delay/lateness/trigger/epoch",
                *row,
                file=sys.stderr,
            )


def _published() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM jobs_jobrun WHERE published_at IS NOT NULL")
        return int(cursor.fetchone()[0])


def bench_spike(count: int) -> dict[str, str]:
    from beat_engine.clock import SystemClock

    anchor = SystemClock().now() + timedelta(seconds=8)
    _seed(count, anchor=anchor, spread_ms=1, interval_s=86_400, prefix="spike-")
    engine = _engine()
    cpu0 = time.process_time()
    deadline = time.monotonic() + 120
    profiler = cProfile.Profile() if os.environ.get("BENCH_PROFILE") else None
    while time.monotonic() < deadline:
        if profiler is not None and SystemClock().now() >= anchor:
            profiler.enable()
        wait = engine.tick()
        if profiler is not None:
            profiler.disable()
        # Counting runs only when idle keeps the benchmark's own queries out of the spike.
        if wait > 0 and SystemClock().now() > anchor and _published() >= count:
            break
        time.sleep(min(wait, 0.05))
    cpu = time.process_time() - cpu0
    if profiler is not None:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
    engine.shutdown()
    n, p50, p99, worst, last = _lateness(anchor)
    span = (last - anchor).total_seconds() if last else float("nan")
    return {
        "spike firings": f"{n} of {count}",
        "spike: all published within (s after due)": f"{span:.2f}",
        "spike claim+publish rate (firings/s)": f"{n / span:,.0f}",
        "spike lateness p50 / p99 / max (s)": f"{p50:.3f} / {p99:.3f} / {worst:.3f}",
        "spike engine CPU (s, whole run incl. idle ticks)": f"{cpu:.2f}",
    }


def bench_steady(rate: int, seconds: int) -> dict[str, str]:
    from beat_engine.clock import SystemClock

    # `rate` jobs per second, each every `seconds` s, spread evenly over the period.
    anchor = SystemClock().now() + timedelta(seconds=6)
    count = rate * seconds
    _seed(count, anchor=anchor, spread_ms=seconds * 1000 * 1, interval_s=seconds, prefix="st-")
    from django.db import connection

    with connection.cursor() as cursor:
        # Spread: job i fires at anchor + (i * 1000 / rate) ms.
        cursor.execute(
            "UPDATE jobs_job SET anchor_at = anchor_at + (regexp_replace(name, '\\D', '', 'g')"
            "::bigint * 1000 / %s) * interval '1 millisecond' - (regexp_replace(name, '\\D',"
            " '', 'g')::bigint %% %s) * interval '1 millisecond' WHERE name LIKE 'st-%%'",
            [rate, seconds * 1000],
        )
        # Seeding can outlast its lead on a busy machine: move the whole schedule so that the
        # first firing is due shortly after the engine starts, never before.
        shift = SystemClock().now() + timedelta(seconds=3) - anchor
        cursor.execute(
            "UPDATE jobs_job SET anchor_at = anchor_at + %s, next_fire_at = anchor_at + %s"
            " WHERE name LIKE 'st-%%'",
            [shift, shift],  # type: ignore[list-item]  # psycopg adapts timedelta
        )
        anchor += shift
    engine = _engine()
    cpu0 = time.process_time()
    end = time.monotonic() + seconds + 6
    while time.monotonic() < end:
        time.sleep(min(engine.tick(), 0.02))
    cpu = time.process_time() - cpu0
    engine.shutdown()
    _print_outliers(anchor)
    n, p50, p99, worst, _ = _lateness(anchor)
    return {
        f"steady {rate}/s for {seconds}s: firings published": str(n),
        "steady lateness p50 / p99 / max (s)": f"{p50:.3f} / {p99:.3f} / {worst:.3f}",
        "steady CPU seconds per 1,000 firings (one node)": f"{1000 * cpu / max(n, 1):.3f}",
    }


def bench_registered(count: int) -> dict[str, str]:
    from beat_engine.clock import SystemClock

    # One million daily jobs spread over the day: a 30 s horizon holds about 350 of them.
    now = SystemClock().now()
    t0 = time.monotonic()
    _seed(count, anchor=now + timedelta(seconds=60), spread_ms=86_400_000, interval_s=86_400,
          prefix="reg-")  # fmt: skip
    seeded = time.monotonic() - t0
    env = dict(os.environ)
    start = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "beat_engine", "--node-id", "rss"], cwd=ROOT, env=env,
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    ready = float("nan")
    for line in proc.stderr:
        if '"beat.lease.owned"' in line:
            ready = time.monotonic() - start
            break
    time.sleep(5)
    rss_mib = _rss_mib(proc.pid)
    proc.terminate()
    proc.wait(timeout=30)
    return {
        f"registered jobs (seeded in {seeded:.1f}s)": f"{count:,}",
        "node start-up to owning all partitions (s, incl. Django import)": f"{ready:.2f}",
        "node RSS after first horizon load (MiB)": f"{rss_mib:.1f}",
    }


def _rss_mib(pid: int) -> float:
    """Resident memory of a process now, in MiB, from /proc."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024  # type: ignore[union-attr]


def _node_cpu(pid: int) -> float:
    """User + system CPU seconds of a process so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def bench_nodes(count: int, nodes: int) -> tuple[float, float, float]:
    """A spike of ``count`` firings handled by ``nodes`` real `manage.py beat_engine` nodes:
    (seconds until all published, firings/s, node CPU seconds per 1,000 firings)."""
    from django.conf import settings

    from beat_engine.clock import SystemClock

    # Registered before the nodes start and due beyond their first horizon, as a real spike
    # is: each firing enters the heap as the horizon reaches it, lookahead_s before its
    # instant (and is claimed ahead within claim_ahead_s of it). The nodes have that long to
    # start and split the partitions.
    lead = timedelta(seconds=settings.SCHEDULER["LOOKAHEAD_S"] + 5)
    anchor = SystemClock().now() + lead
    _seed(count, anchor=anchor, spread_ms=1, interval_s=86_400, prefix="nodes-")
    log = (ROOT / ".local" / "engine-bench" / f"nodes-{nodes}.log").open("w")
    procs = [
        subprocess.Popen(
            [sys.executable, "manage.py", "beat_engine", "--node-id", f"node-{i}"],
            cwd=ROOT,
            env=dict(os.environ),
            stdout=log,
            stderr=log,
        )
        for i in range(nodes)
    ]
    while SystemClock().now() < anchor - timedelta(seconds=0.5):
        time.sleep(0.1)
    cpu0 = sum(_node_cpu(p.pid) for p in procs)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and _published() < count:
        time.sleep(0.5)
    cpu = sum(_node_cpu(p.pid) for p in procs) - cpu0
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=30)
    log.close()
    n, _p50, _p99, _worst, last = _lateness(anchor)
    span = (last - anchor).total_seconds() if last else float("nan")
    return span, n / span, 1000 * cpu / max(n, 1)


def bench_two_nodes(count: int) -> dict[str, str]:
    one = bench_nodes(count, 1)
    two = bench_nodes(count, 2)
    return {
        f"{count} due at once, 1 node: published within (s) / rate (firings/s)":
            f"{one[0]:.2f} / {one[1]:,.0f}",
        f"{count} due at once, 2 nodes: published within (s) / rate (firings/s)":
            f"{two[0]:.2f} / {two[1]:,.0f}",
        "node CPU s per 1,000 firings, 1 node / 2 nodes (ratio)":
            f"{one[2]:.3f} / {two[2]:.3f} ({two[2] / one[2]:.2f}x)",
    }  # fmt: skip


def write_docs(figures: dict[str, str], command: str) -> None:
    path = ROOT / "docs" / "benchmarks.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
    section = (
        "## Beat engine\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d} on this 2-core machine, PostgreSQL and Redis "
        f"embedded on the same machine, shared with other work.\nCommand: `{command}`\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n"
    )
    pattern = re.compile(r"^## Beat engine\n.*?(?=^## |\Z)", re.S | re.M)
    text = pattern.sub(section + "\n", text) if pattern.search(text) else text + "\n" + section
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spike", type=int, default=50_000)
    parser.add_argument("--steady-rate", type=int, default=1000)
    parser.add_argument("--steady-s", type=int, default=30)
    parser.add_argument("--registered", type=int, default=1_000_000)
    parser.add_argument("--nodes-spike", type=int, default=20_000, help="0 skips the 2-node run")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    # No worker drains the queue here (nor in the nodes it starts): the fixed bound, not one
    # sized from a drain rate of zero; the engine's claim and publish are measured.
    os.environ.setdefault("SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", "0")
    services = _setup(ROOT / ".local" / "engine-bench")
    figures: dict[str, str] = {}
    try:
        if args.spike:
            figures.update(bench_spike(args.spike))
        if args.steady_rate:
            figures.update(bench_steady(args.steady_rate, args.steady_s))
        if args.nodes_spike:
            figures.update(bench_two_nodes(args.nodes_spike))
        if args.registered:
            figures.update(bench_registered(args.registered))
    finally:
        services.stop()
    for key, value in figures.items():
        print(f"{key:70} {value}")
    max_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"bench process max RSS (MiB): {max_rss_mib:.0f}")
    if args.write_docs:
        write_docs(figures, "python " + " ".join(sys.argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
