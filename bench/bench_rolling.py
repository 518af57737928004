"""Rolling restart of three beat nodes, then two workers, under a steady 1,000 firings/s (run
by hand).

    .venv/bin/python bench/bench_rolling.py [--rate 1000] [--executed-rate 100] [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/rolling-bench, seeds ``rate x 30`` jobs
firing every 30 s (``rate`` firings a second), starts three `manage.py beat_engine` nodes and
two Celery workers, then restarts the nodes one at a time (SIGTERM, started again with the
same node id, waiting for its partitions to come back), then the workers one at a time
(SIGTERM to the main process, its warm shutdown waited for, a new one started), while a thread
samples every partition's lease key every 5 ms. ``executed-rate`` firings a second run for
real on the workers (target ``bench.effect``, one row per execution in its effects table,
bench/failover_targets.py): two workers drain about that many on this shared 2-core machine.
The others go to a queue no worker reads, where the broker keeps every message, so a message
sent twice for one run is counted.

Prints the longest time any partition had no owner, the publish lateness (p50, p99, max of
the runs' ``lateness``, and the max while nodes left, joined, and workers restarted), firings
missed and duplicated (runs and broker messages), and for the executed firings the missed and
duplicate effects. .local/rolling-bench/result.json also holds, for reading against the nodes'
log, each restart's instants (SIGTERM, the new process registered, its share back) and every
second of the window whose worst firing was over 0.5 s late. With --write-docs, replaces the
"## Rolling restart" section of docs/benchmarks.md and its records (source "bench-rolling") in
docs/benchmarks.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import _seed, _setup  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "Rolling restart"
SOURCE = "bench-rolling"
LOG_DIR = ROOT / ".local" / "rolling-bench"
PARTITIONS = 64
INTERVAL_S = 30
NODES = ["rb-0", "rb-1", "rb-2"]
WORKERS = 2
# The firings no worker executes wait here.
HELD_QUEUE = "rolling-held"


class GapSampler(threading.Thread):
    """Samples every partition's lease key; records how long each stayed without an owner."""

    def __init__(self, client: Any) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.stop = threading.Event()
        self.gaps: list[float] = []
        self.owners: dict[int, str | None] = {}

    def run(self) -> None:
        keys = [f"sched:lease:{p}" for p in range(PARTITIONS)]
        unowned_since: dict[int, float] = {}
        while not self.stop.is_set():
            values = self.client.mget(keys)
            now = time.monotonic()
            self.owners = {p: (v.decode() if v else None) for p, v in enumerate(values)}
            for p, owner in self.owners.items():
                if owner is None:
                    unowned_since.setdefault(p, now)
                elif p in unowned_since:
                    self.gaps.append(now - unowned_since.pop(p))
            time.sleep(0.005)
        now = time.monotonic()
        self.gaps.extend(now - since for since in unowned_since.values())


def _env() -> dict[str, str]:
    return {
        **os.environ, "PYTHONPATH": str(ROOT),
        "SCHEDULER_CLIENT_MODULES": "scheduler_project.demo,bench.failover_targets",
    }  # fmt: skip


def _start(node: str, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "manage.py", "beat_engine", "--node-id", node],
        cwd=ROOT, env=_env(), stdout=log, stderr=log,
    )  # fmt: skip


def _start_worker(index: int, log: Any) -> subprocess.Popen[bytes]:
    # Its own session: SIGTERM reaches the main process only, as a service manager sends it.
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "scheduler_project", "worker", "--pool",
         "prefork", "--concurrency", "2", "-Q", "scheduler", "--loglevel", "WARNING",
         "-n", f"rolling-{index}@%h", "--without-mingle", "--without-gossip",
         "--without-heartbeat"],
        cwd=ROOT, env=_env(), stdout=log, stderr=log, start_new_session=True,
    )  # fmt: skip


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _rows(sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [tuple(r) for r in cursor.fetchall()]


def _scalar(sql: str, params: list[Any]) -> Any:
    return _rows(sql, params)[0][0]


def _late_max(since: float, until: float, mono0: float, wall0: datetime) -> float:
    """The max lateness of the firings scheduled between two monotonic instants."""
    return float(
        _scalar(
            "SELECT max(extract(epoch FROM lateness)) FROM jobs_jobrun"
            " WHERE scheduled_for BETWEEN %s AND %s",
            [wall0 + timedelta(seconds=since - mono0), wall0 + timedelta(seconds=until - mono0)],
        )
        or 0
    )


def run(rate: int, executed_rate: int, steady_s: float, settle_s: float) -> dict[str, Any]:
    import redis
    from django.conf import settings

    from beat_engine.lease_keys import NODES_KEY
    from beat_engine.partitions import assign_partitions
    from bench.failover_targets import EFFECTS_TABLE, ensure_effects_table
    from tests.support.beat_nodes import broker_messages, message_args

    count = rate * INTERVAL_S
    anchor = datetime.now(UTC) + timedelta(seconds=25)
    # Job i fires at anchor + i ms, every 30 s: `rate` firings a second (for rate 1,000).
    _seed(count, anchor=anchor, spread_ms=INTERVAL_S * 1000, interval_s=INTERVAL_S, prefix="rr-")
    # Every (rate / executed_rate)-th job runs on the workers; the others wait in HELD_QUEUE.
    every = max(1, rate // max(1, executed_rate))
    _rows(
        "UPDATE jobs_job SET queue = CASE WHEN substr(name, 4)::int %% %s = 0"
        " THEN 'scheduler' ELSE %s END,"
        " target_name = CASE WHEN substr(name, 4)::int %% %s = 0"
        " THEN 'bench.effect' ELSE target_name END RETURNING 1",
        [every, HELD_QUEUE, every],
    )
    ensure_effects_table()
    client = redis.Redis.from_url(settings.REDIS_URL)
    fair = assign_partitions(PARTITIONS, NODES)
    expected = {p: n for n, parts in fair.items() for p in parts}
    log = (LOG_DIR / "nodes.log").open("ab")
    worker_log = (LOG_DIR / "workers.log").open("ab")
    procs = {node: _start(node, log) for node in NODES}
    workers = [_start_worker(i, worker_log) for i in range(WORKERS)]
    sampler = GapSampler(client)
    phases: dict[str, list[tuple[float, float]]] = {"leave": [], "join": [], "workers": []}
    worker_exits: list[int | None] = []
    try:
        _wait(lambda: _owners(client) == expected, 180, "a fair split")
        while datetime.now(UTC) < anchor:
            time.sleep(0.05)
        mono0, wall0 = time.monotonic(), datetime.now(UTC)
        sampler.start()
        time.sleep(steady_s)
        restarts: list[float] = []
        marks: list[dict[str, Any]] = []
        for node in NODES:
            began = time.monotonic()
            procs[node].terminate()
            procs[node].wait(timeout=60)
            procs[node] = _start(node, log)
            # The old process left the registry before it exited: the node is back in it
            # once the new process has started and loaded its share (docs/engine.md).
            _wait(lambda n=node: client.zscore(NODES_KEY, n) is not None, 180, f"{node} registered")
            registered = time.monotonic()
            phases["leave"].append((began, registered))
            _wait(lambda: _owners(client) == expected, 180, f"{node}'s partitions back")
            back = time.monotonic()
            restarts.append(back - began)
            marks.append({"node": node, "sigterm": began - mono0,
                          "registered": registered - mono0, "back": back - mono0})  # fmt: skip
            time.sleep(settle_s)
            phases["join"].append((registered, back + 1.0))
        for i, worker in enumerate(workers):
            began = time.monotonic()
            worker.terminate()  # the main process only: Celery's warm shutdown
            worker_exits.append(worker.wait(timeout=120))
            workers[i] = _start_worker(i, worker_log)
            time.sleep(settle_s)
            phases["workers"].append((began, time.monotonic()))
        time.sleep(steady_s)
        measured_until = datetime.now(UTC) - timedelta(seconds=3)
        # Every executed firing in the window finishes before anything stops.
        _wait(
            lambda: (
                not _scalar(
                    "SELECT count(*) FROM jobs_jobrun r JOIN jobs_job j ON j.id = r.job_id"
                    " WHERE j.queue = 'scheduler' AND r.scheduled_for BETWEEN %s AND %s"
                    " AND r.state NOT IN ('succeeded', 'failed', 'dead', 'missed', 'skipped')",
                    [anchor, measured_until],
                )
            ),
            300,
            "the executed runs to finish",
        )
    finally:
        sampler.stop.set()
        for proc in [*procs.values(), *workers]:
            proc.terminate()
        for proc in [*procs.values(), *workers]:
            proc.wait(timeout=120)
        log.close()
        worker_log.close()
    sampler.join()
    (n, late_max, late_p99, late_p50) = _rows(
        """
        SELECT count(*), max(extract(epoch FROM lateness)),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM lateness)),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM lateness))
          FROM jobs_jobrun WHERE scheduled_for BETWEEN %s AND %s
        """,
        [anchor, measured_until],
    )[0]
    (unpublished,) = _rows(
        "SELECT count(*) FROM jobs_jobrun WHERE scheduled_for BETWEEN %s AND %s"
        " AND (lateness IS NULL OR state = 'missed')",
        [anchor, measured_until],
    )[0]
    # Every firing due in the window: job i fires at anchor + i ms + k x 30 s.
    due_sql = """
        SELECT count(*) FROM jobs_job j,
               generate_series(j.anchor_at, %s, make_interval(secs => j.interval_seconds)) AS t
         WHERE t >= %s
    """
    (due,) = _rows(due_sql, [measured_until, anchor])[0]
    executed_due = _scalar(due_sql + " AND j.queue = 'scheduler'", [measured_until, anchor])
    # Effects of the executed firings in the window, by the run's dedup key (the key the
    # target is given): a firing with none is missed, a second row is a duplicate effect.
    (effects, effect_keys) = _rows(
        f"SELECT count(*), count(DISTINCT e.key) FROM {EFFECTS_TABLE} e"
        " JOIN jobs_jobrun r ON r.dedup_key = e.key"
        " WHERE r.scheduled_for BETWEEN %s AND %s",
        [anchor, measured_until],
    )[0]
    (duplicate_runs,) = _rows(
        "SELECT count(*) - count(DISTINCT (job_id, scheduled_for)) FROM jobs_jobrun", []
    )[0]
    messages = Counter(message_args(m)[0] for m in broker_messages(client, HELD_QUEUE))
    # Where the lateness was: each second of the window (from the first sample) whose worst
    # firing was published more than half a second late, for reading against the marks.
    timeline = _rows(
        "SELECT floor(extract(epoch FROM scheduled_for - %s))::int AS s,"
        " round(max(extract(epoch FROM lateness))::numeric, 3)::float, count(*)"
        " FROM jobs_jobrun WHERE scheduled_for BETWEEN %s AND %s GROUP BY 1"
        " HAVING max(extract(epoch FROM lateness)) > 0.5 ORDER BY 1",
        [wall0, anchor, measured_until],
    )
    return {
        "rate": rate,
        "executed_rate": rate // every,
        "jobs": count,
        "firings_due": int(due),
        "runs": int(n),
        "missed": int(due) - int(n) + int(unpublished),
        "duplicate_runs": int(duplicate_runs),
        "duplicate_messages": sum(c - 1 for c in messages.values() if c > 1),
        "executed_due": int(executed_due),
        "effects": int(effects),
        "missed_effects": int(executed_due) - int(effect_keys),
        "duplicate_effects": int(effects) - int(effect_keys),
        "worker_exit_codes": worker_exits,
        "max_unowned_s": max(sampler.gaps, default=0.0),
        "unowned_gaps": len(sampler.gaps),
        "lateness_max_s": float(late_max or 0),
        "lateness_p99_s": float(late_p99 or 0),
        "lateness_p50_s": float(late_p50 or 0),
        "lateness_max_by_phase_s": {
            phase: max((_late_max(a, b, mono0, wall0) for a, b in spans), default=0.0)
            for phase, spans in phases.items()
        },
        "restart_s": restarts,
        "restart_marks_s": marks,
        "late_seconds": [list(row) for row in timeline],
        # Other work shares this machine: the 1-minute load average at the end, for context.
        "load_1m": os.getloadavg()[0],
    }


def _owners(client: Any) -> dict[int, str | None]:
    values = client.mget([f"sched:lease:{p}" for p in range(PARTITIONS)])
    return {p: (v.decode() if v else None) for p, v in enumerate(values)}


def figures(r: dict[str, Any]) -> dict[str, str]:
    return {
        f"{r['rate']:,} firings/s, 3 nodes restarted one at a time: firings due / runs published":
            f"{r['firings_due']:,} / {r['runs']:,}",
        "max time a partition had no owner (s) / partitions without an owner, times":
            f"{r['max_unowned_s']:.3f} / {r['unowned_gaps']}",
        "publish lateness p50 / p99 / max (s)":
            f"{r['lateness_p50_s']:.3f} / {r['lateness_p99_s']:.3f} / {r['lateness_max_s']:.3f}",
        "missed firings / duplicate runs / duplicate messages":
            f"{r['missed']} / {r['duplicate_runs']} / {r['duplicate_messages']}",
        "publish lateness max while a node left / a node joined / workers restarted (s)":
            " / ".join(f"{r['lateness_max_by_phase_s'][k]:.3f}"
                       for k in ("leave", "join", "workers")),
        f"executed on 2 workers ({r['executed_rate']:,} firings/s of them): firings due / "
        "effects": f"{r['executed_due']:,} / {r['effects']:,}",
        "missed effects / duplicate effects": f"{r['missed_effects']} / {r['duplicate_effects']}",
        "workers' exit codes after SIGTERM": " / ".join(str(c) for c in r["worker_exit_codes"]),
        "each node restart, SIGTERM to its share back (s)":
            " / ".join(f"{s:.1f}" for s in r["restart_s"]),
        "machine load average (1 min, 2 cores) at the end": f"{r['load_1m']:.1f}",
    }  # fmt: skip


def write_docs(r: dict[str, Any], command: str) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in figures(r).items())
    body = (
        f"## {TITLE}\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on this 2-core machine (PostgreSQL, "
        "Redis, the three nodes and the two workers on it, shared with other work: the load "
        "average is in the table), default lease settings (TTL 10 s, renewal 3 s). "
        f"{r['executed_rate']:,} of the {r['rate']:,} firings a second run for real on two "
        "Celery workers (prefork, 2 processes each; target `bench.effect`, one row per "
        "execution); the others go to a queue no worker reads, where the broker keeps every "
        "message, so a second message for a run would be counted.\n"
        f"Command: `{command}`\n\n"
        "Each node in turn gets SIGTERM: it marks itself as leaving and keeps firing until the "
        "nodes that will take its partitions have loaded their horizon and answered (at most "
        "3 s), then hands its leases to them and leaves; it is started again with the same "
        "node id: it loads its share's horizon, registers and announces itself, and the holders "
        'hand its share back at their next tick (docs/engine.md, "Hand-over"). Then each '
        "worker in turn gets SIGTERM (its main process), finishes its running attempts and "
        "exits, and a new one is started. A thread samples all 64 lease keys every 5 ms. "
        "Lateness by phase: the firings scheduled from a node's SIGTERM to its new process's "
        "registration (left: the stop, the survivors' takeover, and the new process's start "
        "while the survivors serve its share), from that registration to a second after its "
        "share was back (joined), and through the worker restarts.\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n"
    )
    replace_section(TITLE, body)
    metrics: list[tuple[str, float, str]] = [
        ("max_unowned", r["max_unowned_s"], "s"),
        ("max_lateness", r["lateness_max_s"], "s"),
        ("p99_lateness", r["lateness_p99_s"], "s"),
        ("missed", r["missed"], "firings"),
        ("duplicate_runs", r["duplicate_runs"], "runs"),
        ("duplicate_messages", r["duplicate_messages"], "messages"),
        ("missed_effects", r["missed_effects"], "firings"),
        ("duplicate_effects", r["duplicate_effects"], "effects"),
    ]
    records = [
        {"source": SOURCE, "scheduler": "ours-3", "scenario": "rolling-restart",
         "n": r["rate"], "metric": name, "value": value, "unit": unit}
        for name, value, unit in metrics
    ]  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--executed-rate", type=int, default=100)
    parser.add_argument("--steady-s", type=float, default=6.0)
    parser.add_argument("--settle-s", type=float, default=4.0)
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args()
    # Most firings go to a queue no worker reads, where every message is counted: the fixed
    # queue bound, not one sized from a drain rate of zero (docs/limits.md, "The adaptive bound").
    os.environ.setdefault("SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", "0")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    services = _setup(LOG_DIR / "services")
    try:
        result = run(args.rate, args.executed_rate, args.steady_s, args.settle_s)
    finally:
        services.stop()
    command = "python " + " ".join(sys.argv)
    (LOG_DIR / "result.json").write_text(json.dumps({"result": result, "command": command}))
    for key, value in figures(result).items():
        print(f"{key:90} {value}")
    if args.write_docs:
        write_docs(result, command)
    failed = result["missed"] or result["duplicate_runs"] or result["missed_effects"]
    return 1 if failed or result["duplicate_effects"] else 0


if __name__ == "__main__":
    sys.exit(main())
