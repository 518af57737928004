"""The design's scale on one machine: 20 million registered schedules, a steady ~5,600 firings
a second for ten minutes and a minute-boundary spike inside it (run by hand).

    .venv/bin/python bench/bench_scale.py [--registered 20000000] [--steady-s 600]
                                          [--spike 50000] [--nodes 2] [--shared-buffers 6GB]
                                          [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/scale-bench. Registers the schedules
with one server-side ``INSERT ... SELECT`` per million rows (no round trip per row), across
1,000 tenants, in this mix (shares of ``--registered``, all zones UTC):

* 60%: hourly cron ``M * * * *`` (M spread over the hour) with a 60 s jitter window;
* 15%: ``0 0 * * *``, midnight;
* 10%: every 900 s, anchors spread over the period;
* 10% less the spike: daily ``M H * * *`` at a later hour of the day;
* 5%: one-offs spread over the next seven days;
* ``--spike``: ``M * * * *`` with no jitter, M five minutes into the run: all due at one
  instant at that minute boundary.

In the first ten minutes of the hour after the start instant that gives the hourly 3,333/s,
the intervals' 2,222/s and a few one-offs and daily jobs: about 5,600 firings a second, the
design's average (20,000,000 schedules firing once an hour on average).

Then ``--nodes`` real ``manage.py beat_engine`` nodes start ahead of the first firing and run
through the window. No worker executes the runs: a drain empties the broker's lists every
0.2 s, as workers taking the messages would, and the run lease is 15 minutes so that the
sweep sends no message again for a run that nobody started within the window. Measured: node
start-up (process start to its first owned partition), node RSS, publish lateness
(``published_at - due_at``) of every firing in the window, of the spike's alone and of the rest.
With --write-docs replaces the "## Design scale" section of docs/benchmarks.md and its records
(source "bench-scale").
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import _node_cpu, _rss_mib, _setup  # noqa: E402
from bench.bench_fairness import _sql  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "Design scale"
SOURCE = "bench-scale"
SERVICES = ROOT / ".local" / "scale-bench"
TENANTS = 1000
CHUNK = 1_000_000
# The nodes start this long before the first firing: their first horizon load and the
# partition split are done before the window begins.
NODE_LEAD_S = 45.0

# One statement per chunk: row i of the chunk gets its group from the share bounds.
# %(t0)s is the window's start, at a minute boundary; %(spike_at)s the spike's instant.
SEED_SQL = """
INSERT INTO jobs_job (id, tenant_id, name, description, source, kind, cron_expression,
    interval_seconds, anchor_at, run_at, timezone, target_kind, target_name, target_url,
    target_headers, payload, queue, priority, status, status_reason, next_fire_at, partition,
    max_attempts, retry_base_delay, retry_max_delay, retry_jitter, retry_on_client_error,
    timeout, concurrency_policy, catchup_policy, catchup_limit, jitter_window, critical,
    version, idempotency_key, request_hash, created_at, updated_at, trigger_rule,
    target_group)
SELECT gen_random_uuid(), %(tenant0)s + i %% %(tenants)s, 'scale-' || i, '', 'api',
       g.kind, g.cron, g.every, g.anchor, g.run_at, 'UTC', 'callable', 'demo.heartbeat', '',
       '{}', '{}', 'scheduler', 5, 'active', '', g.next_at,
       (i::bigint * 7919) %% %(partitions)s, 3, interval '10 seconds', interval '10 minutes',
       true, false, interval '5 minutes', 'allow', 'skip', 100, g.jitter, false, 1, '', '',
       now(), now(), 'all_success', ''
  FROM generate_series(%(lo)s, %(hi)s) AS i
 CROSS JOIN LATERAL (
   SELECT CASE
     WHEN i < %(b_hourly)s THEN 'cron'
     WHEN i < %(b_midnight)s THEN 'cron'
     WHEN i < %(b_interval)s THEN 'interval'
     WHEN i < %(b_daily)s THEN 'cron'
     WHEN i < %(b_once)s THEN 'once'
     ELSE 'cron' END AS kind,
   CASE
     WHEN i < %(b_hourly)s THEN (i %% 60) || ' * * * *'
     WHEN i < %(b_midnight)s THEN '0 0 * * *'
     WHEN i < %(b_interval)s THEN ''
     WHEN i < %(b_daily)s THEN (i %% 60) || ' '
          || (extract(hour FROM %(t0)s::timestamptz AT TIME ZONE 'UTC')::int + 2 + i %% 20)
             %% 24 || ' * * *'
     WHEN i < %(b_once)s THEN ''
     ELSE %(spike_minute)s || ' * * * *' END AS cron,
   CASE WHEN i >= %(b_midnight)s AND i < %(b_interval)s THEN 900 END AS every,
   CASE WHEN i >= %(b_midnight)s AND i < %(b_interval)s
        THEN %(t0)s::timestamptz + (i %% 900000) * interval '1 millisecond' END AS anchor,
   CASE WHEN i >= %(b_daily)s AND i < %(b_once)s
        THEN %(t0)s::timestamptz + (i %% 604800) * interval '1 second' END AS run_at,
   CASE
     WHEN i < %(b_hourly)s THEN
       date_trunc('hour', %(t0)s::timestamptz) + (i %% 60) * interval '1 minute'
       + CASE WHEN date_trunc('hour', %(t0)s::timestamptz) + (i %% 60) * interval '1 minute'
                   < %(t0)s::timestamptz THEN interval '1 hour' ELSE interval '0' END
     WHEN i < %(b_midnight)s THEN date_trunc('day', %(t0)s::timestamptz) + interval '1 day'
     WHEN i < %(b_interval)s THEN %(t0)s::timestamptz + (i %% 900000) * interval '1 millisecond'
     WHEN i < %(b_daily)s THEN date_trunc('hour', %(t0)s::timestamptz)
          + (2 + i %% 20) * interval '1 hour' + (i %% 60) * interval '1 minute'
     WHEN i < %(b_once)s THEN %(t0)s::timestamptz + (i %% 604800) * interval '1 second'
     ELSE %(spike_at)s::timestamptz END AS next_at,
   CASE WHEN i < %(b_hourly)s THEN interval '60 seconds' ELSE interval '0' END AS jitter
 ) AS g
"""


def bounds(registered: int, spike: int) -> dict[str, int]:
    """Exclusive upper row numbers of each group; the spike's rows come last."""
    hourly = registered * 60 // 100
    midnight = hourly + registered * 15 // 100
    interval = midnight + registered * 10 // 100
    once_share = registered * 5 // 100
    daily = registered - spike - once_share
    if daily < interval:
        raise SystemExit(f"--spike {spike} leaves no room for the daily group of {registered}")
    return {"b_hourly": hourly, "b_midnight": midnight, "b_interval": interval,
            "b_daily": daily, "b_once": daily + once_share}  # fmt: skip


def _reset() -> int:
    import redis
    from django.conf import settings

    _sql(
        "TRUNCATE jobs_deadletter, jobs_runattempt, jobs_dedupkey, jobs_jobrun, jobs_job,"
        " jobs_partitionepoch CASCADE"
    )
    redis.Redis.from_url(settings.REDIS_URL).flushall()
    now = datetime.now(UTC)
    _sql(
        "INSERT INTO jobs_tenant (name, is_active, created_at, max_queued_runs)"
        " SELECT 'scale-' || t, true, %s, 100000 FROM generate_series(1, %s) t"
        " ON CONFLICT (name) DO NOTHING",
        [now, TENANTS],
    )
    first = _sql("SELECT min(id), max(id) FROM jobs_tenant WHERE name LIKE 'scale-%%'")[0]
    if first[1] - first[0] + 1 != TENANTS:
        raise SystemExit("the scale tenants' ids are not consecutive; reset .local/scale-bench")
    return int(first[0])


def _size_buffers(services: Any, size: str) -> None:
    """PostgreSQL's shared_buffers, restarting it for a new size. At the default 128MB the
    20,000,000 jobs (11 GB with their indexes) were read back from the OS cache 8 KB at a time
    by every claim (about 20 index blocks per job updated), and the host spent its CPU in the
    kernel: the two nodes fired 2,900 of the 5,600 firings a second and fell minutes behind."""
    from django.db import connections

    if _sql("SHOW shared_buffers")[0][0] == size:
        return
    _sql(f"ALTER SYSTEM SET shared_buffers = '{size}'")
    connections.close_all()
    services.postgres.stop()
    services.postgres.start()


def seed(registered: int, spike: int, t0: datetime, spike_at: datetime) -> float:
    from django.conf import settings

    tenant0 = _reset()
    params = {**bounds(registered, spike), "tenant0": tenant0, "tenants": TENANTS,
              "partitions": int(settings.SCHEDULER["PARTITIONS"]), "t0": t0,
              "spike_at": spike_at, "spike_minute": spike_at.minute}  # fmt: skip
    start = time.monotonic()
    for lo in range(0, registered, CHUNK):
        hi = min(registered, lo + CHUNK) - 1
        _sql(SEED_SQL, {**params, "lo": lo, "hi": hi})
        done = hi + 1
        rate = done / (time.monotonic() - start)
        left = (registered - done) / rate
        print(f"seeded {done:>12,} of {registered:,}  {rate:,.0f}/s  ~{left:,.0f} s left",
              file=sys.stderr, flush=True)  # fmt: skip
    _sql("ANALYZE jobs_job")
    return time.monotonic() - start


def _drain(stop: threading.Event) -> None:
    """Empties the broker's lists, as workers taking every message would."""
    import redis
    from django.conf import settings

    from beat_engine.config import broker_redis_url
    from beat_engine.publisher import PRIORITY_STEPS, queue_key

    client = redis.Redis.from_url(broker_redis_url(settings.CELERY_BROKER_URL))
    keys = sorted({queue_key("scheduler", step) for step in PRIORITY_STEPS})
    while not stop.wait(0.2):
        pipe = client.pipeline(transaction=True)
        for key in keys:
            pipe.ltrim(key, 1, 0)
        pipe.execute()


def _wait_owned(
    proc: subprocess.Popen[str], start: float, ready: list[float], log: Path | None
) -> None:
    """Notes the node's start-up, and keeps reading so that it never blocks on a full pipe;
    with BENCH_LOG set, its JSON lines go to a file of their own, to explain an outlier."""
    assert proc.stderr is not None
    with open(log, "w") if log is not None else open(os.devnull, "w") as out:
        for line in proc.stderr:
            if not ready and '"beat.lease.owned"' in line:
                ready.append(time.monotonic() - start)
            out.write(line)


def _lateness(
    since: datetime, until: datetime, spike_at: datetime | None, *, spike: bool = True
) -> dict[str, Any]:
    """Lateness of the window's firings: all of them, or only the spike's (``spike``), or all
    but the spike's."""
    where = "scheduled_for >= %s AND scheduled_for < %s"
    params: list[Any] = [since, until]
    if spike_at is not None:
        where += " AND due_at = %s" if spike else " AND due_at <> %s"
        params.append(spike_at)
    (n, p50, p99, worst, published), = _sql(
        f"""
        SELECT count(*),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
               max(extract(epoch FROM lateness)), count(published_at)
          FROM jobs_jobrun WHERE {where}
        """,
        params,
    )  # fmt: skip
    return {"runs": int(n), "published": int(published), "p50_s": float(p50 or 0),
            "p99_s": float(p99 or 0), "max_s": float(worst or 0)}  # fmt: skip


def _late_seconds(since: datetime, until: datetime, over_s: float) -> list[tuple[Any, ...]]:
    """The ten seconds of the window (by due instant) holding the most firings later than
    ``over_s``: where a p99 comes from."""
    return _sql(
        """
        SELECT extract(epoch FROM date_trunc('second', due_at) - %s)::int, count(*),
               round(max(extract(epoch FROM lateness))::numeric, 3)
          FROM jobs_jobrun
         WHERE scheduled_for >= %s AND scheduled_for < %s AND lateness > %s * interval '1 s'
         GROUP BY 1 ORDER BY 2 DESC LIMIT 10
        """,
        [since, since, until, over_s],
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    from beat_engine.clock import SystemClock

    # The window starts at a minute boundary far enough ahead for the seeding to finish
    # (measured here: 15,000-25,000 rows a second) and the nodes to start before it.
    guess_s = args.registered / 15_000 + NODE_LEAD_S + 60
    t0 = (SystemClock().now() + timedelta(seconds=guess_s)).replace(second=0, microsecond=0)
    t0 += timedelta(minutes=1)
    spike_at = t0 + timedelta(seconds=args.spike_after_s)
    seeded_s = seed(args.registered, args.spike, t0, spike_at)
    start_at = t0 - timedelta(seconds=NODE_LEAD_S)
    if SystemClock().now() > start_at:
        raise SystemExit(f"seeding took {seeded_s:.0f} s, past the planned start; rerun")
    while SystemClock().now() < start_at:
        time.sleep(0.2)
    env = {**os.environ, "SCHEDULER_RUN_LEASE_S": "900",
           "SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S": "0"}  # fmt: skip
    stop = threading.Event()
    drain = threading.Thread(target=_drain, args=(stop,), daemon=True)
    drain.start()
    procs, ready = [], []
    began = time.monotonic()
    for i in range(args.nodes):
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "beat_engine", "--node-id", f"scale-{i}"], cwd=ROOT,
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        got: list[float] = []
        log = Path(f"{os.environ['BENCH_LOG']}.{i}") if os.environ.get("BENCH_LOG") else None
        threading.Thread(target=_wait_owned, args=(proc, began, got, log), daemon=True).start()
        procs.append(proc)
        ready.append(got)
    time.sleep(NODE_LEAD_S - 5)
    rss_start = [_rss_mib(p.pid) for p in procs]
    while SystemClock().now() < t0:
        time.sleep(0.2)
    cpu0 = [_node_cpu(p.pid) for p in procs]
    end = t0 + timedelta(seconds=args.steady_s)
    rss_max = list(rss_start)
    while SystemClock().now() < end + timedelta(seconds=15):
        time.sleep(1)
        rss_max = [max(m, _rss_mib(p.pid)) for m, p in zip(rss_max, procs, strict=True)]
    cpu = sum(_node_cpu(p.pid) for p in procs) - sum(cpu0)
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.wait(timeout=60)
    stop.set()
    drain.join()
    window = _lateness(t0, end, None)
    spike = _lateness(t0, end, spike_at) if args.spike else None
    steady = _lateness(t0, end, spike_at, spike=False) if args.spike else window
    shared_buffers = _sql("SHOW shared_buffers")[0][0]
    # Firings the nodes never claimed have no run: the lateness above is of the claimed ones.
    ((unclaimed,),) = _sql(
        "SELECT count(*) FROM jobs_job WHERE status = 'active' AND next_fire_at >= %s"
        " AND next_fire_at < %s",
        [t0, end],
    )
    for second, late, worst in _late_seconds(t0, end, 0.1):
        print(f"  {late:>7,} firings due at t0+{second}s later than 0.1 s (worst {worst} s)",
              file=sys.stderr)  # fmt: skip
    return {
        "registered": args.registered, "seeded_s": seeded_s, "nodes": args.nodes,
        "startup_s": [g[0] if g else float("nan") for g in ready],
        "rss_start_mib": rss_start, "rss_max_mib": rss_max, "steady_s": args.steady_s,
        "window": window, "steady": steady, "spike": spike, "spike_n": args.spike,
        "node_cpu_per_1000": 1000 * cpu / max(window["runs"], 1), "unclaimed": int(unclaimed),
        "shared_buffers": shared_buffers,
        "measured_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M}", "load": os.getloadavg()[0],
        "command": "python bench/bench_scale.py " + " ".join(sys.argv[1:]),
    }  # fmt: skip


def table(result: dict[str, Any]) -> list[tuple[str, str]]:
    w, s, st = result["window"], result["spike"], result["steady"]
    rows = [
        ("registered schedules (seeded in)",
         f"{result['registered']:,} ({result['seeded_s']:.0f} s)"),
        ("beat nodes", str(result["nodes"])),
        ("node start-up to its first owned partition (s)",
         " / ".join(f"{v:.2f}" for v in result["startup_s"])),
        ("node RSS after its first horizon load (MiB)",
         " / ".join(f"{v:.0f}" for v in result["rss_start_mib"])),
        ("node RSS, highest in the window (MiB)",
         " / ".join(f"{v:.0f}" for v in result["rss_max_mib"])),
        (f"firings of the {result['steady_s']} s window claimed (published)",
         f"{w['runs']:,} ({w['published']:,})"),
        ("jobs with a firing in the window still unclaimed at its end",
         f"{result['unclaimed']:,}"),
        ("claimed firings per second, averaged over the window",
         f"{w['runs'] / result['steady_s']:,.0f}"),
        ("publish lateness p50 / p99 / max (s)",
         f"{w['p50_s']:.3f} / {w['p99_s']:.3f} / {w['max_s']:.3f}"),
        ("node CPU s per 1,000 firings (all nodes)", f"{result['node_cpu_per_1000']:.3f}"),
        ("the window less the spike: lateness p50 / p99 / max (s)",
         f"{st['p50_s']:.3f} / {st['p99_s']:.3f} / {st['max_s']:.3f}"),
    ]  # fmt: skip
    if s is not None:
        rows += [
            (f"spike: {result['spike_n']:,} due at one minute boundary (published)",
             f"{s['runs']:,} ({s['published']:,})"),
            ("spike lateness p50 / p99 / last (s)",
             f"{s['p50_s']:.3f} / {s['p99_s']:.3f} / {s['max_s']:.3f}"),
        ]  # fmt: skip
    return rows


def write_docs(result: dict[str, Any]) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in table(result))
    body = (
        f"## {TITLE}\n\n"
        f"Measured {result['measured_at']} UTC on this 2-core machine (load average "
        f"{result['load']:.1f} at the end), embedded PostgreSQL (shared_buffers "
        f"{result['shared_buffers']}) and Redis on Unix sockets, the nodes sharing the two "
        "cores with them. The mix and the method are in the docstring of bench/bench_scale.py: "
        "no worker executes, a drain empties the broker's lists. Regenerated by the command; "
        f"not edited by hand.\nCommand: `{result['command']}`\n\n"
        f"| figure | value |\n| --- | ---: |\n{rows}\n"
    )
    replace_section(TITLE, body)
    w = result["window"]
    records = [
        {"source": SOURCE, "scheduler": f"ours-{result['nodes']}", "scenario": "design-scale",
         "n": result["registered"], "metric": metric, "value": value, "unit": unit}
        for metric, value, unit in (
            ("p99_lateness", w["p99_s"], "s"), ("max_lateness", w["max_s"], "s"),
            ("p99_lateness_without_spike", result["steady"]["p99_s"], "s"),
            ("claimed_firings_per_s", w["runs"] / result["steady_s"], "1/s"),
            ("unclaimed_at_end", result["unclaimed"], "jobs"),
            ("rss_max", max(result["rss_max_mib"]), "MiB"),
            ("startup", max(result["startup_s"]), "s"),
        )
    ]  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registered", type=int, default=20_000_000)
    parser.add_argument("--steady-s", type=int, default=600)
    parser.add_argument("--spike", type=int, default=50_000)
    parser.add_argument("--spike-after-s", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--shared-buffers", default="6GB")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    if args.registered < 1000 or args.nodes < 1 or args.steady_s < 10:
        parser.error("--registered at least 1000, --nodes at least 1, --steady-s at least 10")
    if not 0 <= args.spike_after_s < args.steady_s or args.spike_after_s % 60:
        parser.error("--spike-after-s is a whole minute inside the window")
    if not re.fullmatch(r"\d+[kMG]B", args.shared_buffers):
        parser.error("--shared-buffers is a size such as 6GB")
    services = _setup(SERVICES)
    try:
        _size_buffers(services, args.shared_buffers)
        result = run(args)
    finally:
        services.stop()
    for key, value in table(result):
        print(f"{key:62} {value}")
    if args.write_docs:
        write_docs(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
