"""Failover with a short lease TTL: time to resume after kill -9, and leases through a spike.

    .venv/bin/python bench/bench_failover.py [--ttl 3 --renew 1] [--repetitions 5]
                                             [--rate 500] [--spike 50000] [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/failover-bench.

* **Kill**: two real `manage.py beat_engine` nodes share ``--rate`` interval jobs (period 1 s,
  catch-up replay_all); once both dispatch, the node holding most partitions is killed with
  SIGKILL. Resume = from the kill to the first push, after it, of a run of one of the killed
  node's partitions (``due_at + lateness``, or ``published_at`` for a run the new owner sent
  again), both on this machine's clock. Repeated ``--repetitions`` times with fresh nodes.
* **Spike**: one in-process engine holding all partitions claims ``--spike`` firings due at
  once. Its lease store is wrapped to record the monotonic instant of every renewal; the
  figures are the partition leases lost (goal 0), the epochs taken during the spike (0: no
  partition changed owner) and the longest gap between two renewals (must stay below the TTL).

``--save FILE`` keeps a run's results; ``--docs-from FILE`` reports them without running (to
add ``--compare-results`` once that run is done).

``--compare-results`` adds the failover scenario of a saved `bench.compare` run (its
``results-<profile>.pickle``, e.g. run with ``BENCH_FAILOVER_LEASE_S=3 python -m bench.compare
--only ours-2 redbeat --scenarios failover --docs DIR``): that tool rewrites its whole section,
so a short-lease run of one scenario is reported here instead.

With --write-docs, replaces the "## Failover with a short lease TTL" section of
docs/benchmarks.md (bench/docs_section.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import statistics
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

TITLE = "Failover with a short lease TTL"
SOURCE = "bench-failover"
SERVICES_DIR = ROOT / ".local" / "failover-bench"


def _now() -> datetime:
    from beat_engine.clock import SystemClock

    return SystemClock().now()


def _lease_env(ttl: float, renew: float) -> dict[str, str]:
    return {"SCHEDULER_LEASE_TTL_S": str(ttl), "SCHEDULER_LEASE_RENEW_S": str(renew)}


def _owners() -> dict[int, str]:
    import redis
    from django.conf import settings

    from beat_engine.redis_leases import LEASE_KEY

    client = redis.Redis.from_url(settings.REDIS_URL)
    partitions = int(settings.SCHEDULER["PARTITIONS"])
    values = client.mget([LEASE_KEY.format(partition=p) for p in range(partitions)])
    client.close()
    return {p: v.decode() for p, v in enumerate(values) if v is not None}


def _first_push_after(partitions: frozenset[int], kill_at: datetime) -> datetime | None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT min(pushed) FROM (
                SELECT COALESCE(due_at + lateness, published_at) AS pushed
                  FROM jobs_jobrun WHERE partition = ANY(%s)) AS r
             WHERE pushed > %s
            """,
            [sorted(partitions), kill_at],
        )
        row = cursor.fetchone()
    return row[0] if row else None


def _grid_counts(anchor: datetime, until: datetime) -> tuple[int, int]:
    """(firings missing from the 1 s grid before ``until``, firings with more than one run)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*) FROM jobs_job j
             CROSS JOIN LATERAL generate_series(j.anchor_at, %s, interval '1 second') AS g(at)
             WHERE NOT EXISTS (SELECT 1 FROM jobs_jobrun r
                                WHERE r.job_id = j.id AND r.scheduled_for = g.at)
            """,
            [until],
        )
        missing = int(cursor.fetchone()[0])
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM jobs_jobrun GROUP BY job_id, scheduled_for"
            " HAVING count(*) > 1) AS d"
        )
        doubled = int(cursor.fetchone()[0])
    return missing, doubled


def kill_once(rate: int, ttl: float, renew: float, log_dir: Path, index: int) -> dict[str, Any]:
    from django.db import connection

    anchor = _now() + timedelta(seconds=8)
    _seed(rate, anchor=anchor, spread_ms=1000, interval_s=1, prefix=f"fo{index}-")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE jobs_job SET catchup_policy = 'replay_all'")
    env = {**os.environ, **_lease_env(ttl, renew)}
    nodes = [f"fo-{index}-{i}" for i in range(2)]
    procs = []
    for node in nodes:
        log = (log_dir / f"{node}.log").open("w")
        procs.append(
            subprocess.Popen(
                [sys.executable, "manage.py", "beat_engine", "--node-id", node],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=log,
                start_new_session=True,
            )
        )
        log.close()
    try:
        # Both nodes dispatching for a few seconds: a steady state before the kill.
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if _now() > anchor + timedelta(seconds=3) and set(_owners().values()) == set(nodes):
                break
            time.sleep(0.2)
        owners = _owners()
        counts = {n: sum(1 for o in owners.values() if o == n) for n in nodes}
        victim = max(nodes, key=lambda n: counts[n])
        held = frozenset(p for p, o in owners.items() if o == victim)
        proc = procs[nodes.index(victim)]
        kill_at = _now()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        time.sleep(ttl + renew + 4)
        until = _now() - timedelta(seconds=2)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=30)
    first = _first_push_after(held, kill_at)
    missing, doubled = _grid_counts(anchor, until)
    return {
        "resume_s": (first - kill_at).total_seconds() if first else None,
        "victim_partitions": len(held),
        "missing": missing,
        "doubled": doubled,
    }


class _TimedStore:
    """A LeaseStore that records when each renewal (extend) was sent, on the monotonic clock."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.renewals: list[float] = []

    def extend(self, partitions: list[int], node: str, ttl_ms: int) -> list[int]:
        if partitions:
            self.renewals.append(time.monotonic())
        extended: list[int] = self._inner.extend(partitions, node, ttl_ms)
        return extended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _counter(metric: Any) -> float:
    return float(metric._value.get())


def _epochs_taken() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT COALESCE(sum(epoch), 0) FROM jobs_partitionepoch")
        return int(cursor.fetchone()[0])


def spike(count: int, ttl: float, renew: float, *, keeper: bool) -> dict[str, Any]:
    from beat_engine import metrics
    from beat_engine.clock import SystemClock
    from beat_engine.config import EngineConfig
    from beat_engine.runtime import build_engine

    anchor = _now() + timedelta(seconds=6)
    _seed(count, anchor=anchor, spread_ms=1, interval_s=86_400, prefix="spike-")
    config = EngineConfig.from_settings(node_id="spike-node", lease_ttl_s=ttl, lease_renew_s=renew)
    engine = build_engine(config, clock=SystemClock())
    store = _TimedStore(engine.ownership.store)
    engine.ownership.store = store
    if keeper:
        engine.start_lease_keeper()  # as run() does; --no-keeper renews in the tick only
    lost0, fenced0 = _counter(metrics.LEASES_LOST), _counter(metrics.FENCED)
    epochs_before: int | None = None
    published = 0
    deadline = time.monotonic() + 120
    spike_start = spike_end = None
    while time.monotonic() < deadline:
        wait = engine.tick()
        if epochs_before is None and len(engine.leases) == config.partitions:
            epochs_before = _epochs_taken()
        if spike_start is None and _now() >= anchor:
            spike_start = time.monotonic()
        if wait > 0 and _now() > anchor:
            from django.db import connection

            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM jobs_jobrun WHERE state = 'queued'")
                published = int(cursor.fetchone()[0])
            if published >= count:
                spike_end = time.monotonic()
                break
        time.sleep(min(wait, 0.05))
    epochs_after = _epochs_taken()
    engine.shutdown()
    during = [
        t for t in sorted(store.renewals) if spike_start is not None and t >= spike_start - renew
    ]
    gaps = [b - a for a, b in itertools.pairwise(during)]
    return {
        "claimed": published,
        "drained_s": (spike_end - spike_start) if spike_start and spike_end else None,
        "lost": int(_counter(metrics.LEASES_LOST) - lost0),
        "fenced": int(_counter(metrics.FENCED) - fenced0),
        "epochs_taken": epochs_after - (epochs_before or epochs_after),
        "max_gap_s": max(gaps) if gaps else None,
        "renewals": len(during),
    }


def write_json(kills: list[dict[str, Any]], spiked: dict[str, Any] | None, args: Any) -> None:
    """Replace this benchmark's records in docs/benchmarks.json, keeping the others'."""
    base = {"source": SOURCE, "scheduler": "ours-2", "lease_ttl_s": args.ttl,
            "lease_renew_s": args.renew}  # fmt: skip
    records: list[dict[str, Any]] = []
    resumes = [k["resume_s"] for k in kills if k["resume_s"] is not None]
    if resumes:
        records.append({
            **base, "scenario": "failover_kill", "n": args.rate, "metric": "resume",
            "value": statistics.median(resumes), "unit": "s", "repetitions": len(kills),
            "min": min(resumes), "max": max(resumes),
        })  # fmt: skip
    if spiked is not None:
        spike = {**base, "scheduler": "ours-1", "scenario": "spike_leases", "n": args.spike}
        records += [
            {**spike, "metric": "leases_lost", "value": spiked["lost"], "unit": "leases"},
            {**spike, "metric": "epochs_taken", "value": spiked["epochs_taken"], "unit": "epochs"},
            {**spike, "metric": "max_renewal_gap", "value": spiked["max_gap_s"], "unit": "s"},
        ]
    replace_records(SOURCE, records)


def compare_figures(path: Path) -> dict[str, str]:
    """The failover runs of a saved bench.compare run, per scheduler."""
    import pickle

    _machine, _notes, results = pickle.loads(path.read_bytes())
    figures: dict[str, str] = {}
    for scheduler in sorted({r.scheduler for r in results if r.case.scenario == "failover"}):
        runs = [r for r in results if r.scheduler == scheduler and r.case.scenario == "failover"]
        label = runs[0].case.label
        resumes = [r.failover.resume_s for r in runs if r.failover and r.failover.resume_s]
        failed = [r for r in runs if r.error]
        errors = sorted({r.error for r in failed if r.error})
        value = (
            f"{_fmt(statistics.median(resumes))} / {_fmt(max(resumes))}, missed "
            f"{sum(r.misses for r in runs)}, dup {sum(r.duplicates for r in runs)}"
            if resumes
            else "did not resume"
        )
        if failed:
            early = sum(1 for r in failed if r.kill_at is None)
            value += (
                f" ({len(failed)} of {len(runs)} run(s) ended by an error, {early} of them "
                f"before the kill: {'; '.join(errors)})"
            )
        figures[f"bench.compare {label}, {scheduler}: resume p50 / max (s) of {len(runs)}"] = value
    return figures


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


_SAVED_ARGS = ("ttl", "renew", "rate", "spike", "no_keeper")


def measure(args: Any) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The kill runs and the spike; saved to ``args.save`` when given (see --docs-from)."""
    kills: list[dict[str, Any]] = []
    spiked: dict[str, Any] | None = None
    load_before = os.getloadavg()
    services = _setup(SERVICES_DIR)
    log_dir = SERVICES_DIR / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        for i in range(args.repetitions):
            kills.append(kill_once(args.rate, args.ttl, args.renew, log_dir, i))
            print(f"kill {i + 1}: {kills[-1]}", flush=True)
        if args.spike:
            spiked = spike(args.spike, args.ttl, args.renew, keeper=not args.no_keeper)
            print(f"spike: {spiked}", flush=True)
    finally:
        services.stop()
    args.load = [load_before[0], os.getloadavg()[0]]
    if args.save is not None:
        saved = {
            "argv": list(sys.argv),
            "load": args.load,
            "kills": kills,
            "spike": spiked,
            "args": {k: getattr(args, k) for k in _SAVED_ARGS},
        }
        args.save.write_text(json.dumps(saved, indent=1))
    return kills, spiked


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--renew", type=float, default=1.0)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--rate", type=int, default=500, help="firings/s during the kill runs")
    parser.add_argument("--spike", type=int, default=50_000, help="0 skips the spike")
    parser.add_argument(
        "--no-keeper", action="store_true",
        help="spike without the lease keeper thread (renewal in the tick only), for comparison",
    )  # fmt: skip
    parser.add_argument(
        "--compare-results", type=Path, action="append", default=[],
        help="a saved bench.compare results pickle; repeat for several (e.g. quick and full)",
    )  # fmt: skip
    parser.add_argument(
        "--save", type=Path, default=None,
        help="write this run's kill and spike results to this JSON file",
    )  # fmt: skip
    parser.add_argument(
        "--docs-from", type=Path, default=None,
        help="report the results saved by --save instead of running (e.g. once the "
        "side-by-side run for --compare-results is done)",
    )  # fmt: skip
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    # No worker reads the queue and every message is counted: the fixed queue bound, not one
    # sized from a drain rate of zero (docs/limits.md, "The adaptive bound").
    os.environ.setdefault("SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", "0")
    kills: list[dict[str, Any]] = []
    spiked: dict[str, Any] | None = None
    command = list(sys.argv)
    if args.docs_from is not None:
        saved = json.loads(args.docs_from.read_text())
        kills, spiked = saved["kills"], saved["spike"]
        args.load = saved.get("load")
        command = [*saved["argv"], "then", *sys.argv]
        # The figures' labels come from the saved run's arguments.
        for name in _SAVED_ARGS:
            setattr(args, name, saved["args"][name])
    else:
        kills, spiked = measure(args)
    figures: dict[str, str] = {}
    resumes = [k["resume_s"] for k in kills if k["resume_s"] is not None]
    if kills:
        p50 = statistics.median(resumes) if resumes else None
        figures[
            f"kill -9 of one node of two, {args.rate} firings/s: resume p50 / max (s), "
            f"{len(resumes)} of {len(kills)} resumed"
        ] = f"{_fmt(p50)} / {_fmt(max(resumes, default=None))}"
        figures["bound: TTL + one renewal (s)"] = f"{args.ttl + args.renew:.2f}"
        figures["firings missing / with two runs, all kill runs"] = (
            f"{sum(k['missing'] for k in kills)} / {sum(k['doubled'] for k in kills)}"
        )
    if spiked is not None:
        mode = "renewal in the tick only" if args.no_keeper else "lease keeper thread"
        figures[f"spike of {args.spike:,}, one node ({mode}): claimed / drained in (s)"] = (
            f"{spiked['claimed']:,} / {_fmt(spiked['drained_s'])}"
        )
        figures["spike: leases lost / fenced out / epochs taken (goal 0 / 0 / 0)"] = (
            f"{spiked['lost']} / {spiked['fenced']} / {spiked['epochs_taken']}"
        )
        figures["spike: longest gap between renewals (s), renewals"] = (
            f"{_fmt(spiked['max_gap_s'])}, {spiked['renewals']}"
        )
    for path in args.compare_results:
        figures.update(compare_figures(path))
    if getattr(args, "load", None):
        figures["load average (1 min) at the start / end of the kill and spike runs"] = (
            f"{args.load[0]:.2f} / {args.load[1]:.2f}"
        )
    for key, value in figures.items():
        print(f"{key:90} {value}")
    if args.write_docs:
        rows = "\n".join(f"| {k} | {v} |" for k, v in figures.items())
        body = (
            f"## {TITLE}\n\n"
            f"Measured {datetime.now(UTC):%Y-%m-%d} on this 2-core machine (shared with other "
            f"work), lease TTL {args.ttl:g} s, renewal every {args.renew:g} s.\n"
            f"Command: `python {' '.join(command)}`\n\n"
            f"| figure | value |\n| --- | --- |\n{rows}\n"
        )
        replace_section(TITLE, body)
        write_json(kills, spiked, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
