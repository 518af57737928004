"""Per-firing costs: CPU, rows, WAL bytes and Redis commands of dispatch and of execution
(run by hand; the figures docs/scaling.md sizes a deployment from).

    .venv/bin/python bench/bench_costs.py [--firings 20000] [--runs 2000] [--write-docs]

Starts its own embedded PostgreSQL and Redis in .local/costs-bench. Dispatch: ``--firings``
interval jobs due at one instant, one `manage.py beat_engine` node, no worker; from just before
the instant until every run is marked published it reads PostgreSQL's WAL position and row
counters (pg_stat_user_tables), Redis's command counters (INFO commandstats) and the CPU time
of the node, of every PostgreSQL process and of Redis (psutil). Execution: ``--runs`` jobs due
at one instant, once not critical and once critical (a dedup key per success), with one Celery
worker (prefork, 2 processes) already started; the same counters from just before the instant
until every run has finished, minus the dispatch's share (its per-firing figures times the
runs). Both run the node with claims ahead off (``SCHEDULER_CLAIM_AHEAD_S=0``): a claim ahead
is the same statements and push as a claim at the instant, made up to 20 s before it, where a
window opened just before the instant would miss it, and one opened that early would count
20 s of the servers' idle and background work against a few thousand runs. CPU is read
before the processes stop; WAL and row counters after they stopped (a backend reports its row
counts when it goes idle or exits), so they include the node's hand-back of its 64 leases (64
row updates). Prints per-firing figures; with --write-docs
replaces the "## Per-firing costs" section of docs/benchmarks.md and its records (source
"bench-costs").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_engine import _seed, _setup  # noqa: E402
from bench.bench_fairness import _broker, _spawn, _sql  # noqa: E402
from bench.docs_section import replace_records, replace_section  # noqa: E402

TITLE = "Per-firing costs"
SOURCE = "bench-costs"
LOG_DIR = ROOT / ".local" / "costs-bench"
ROW_SQL = """
SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_del), 0)
  FROM pg_stat_user_tables WHERE relname LIKE 'jobs\\_%%'
"""


@dataclass
class Reading:
    wal: int
    inserted: int
    updated: int
    deleted: int
    redis_calls: int
    cpu: dict[str, float]


def _redis_calls(client: Any) -> int:
    stats = client.info("commandstats")
    # Our own INFO calls are left out: the bench's, not the system's.
    return sum(int(v["calls"]) for k, v in stats.items() if k != "cmdstat_info")


def _cpu(proc: Any) -> float:
    times = proc.cpu_times()
    return float(times.user + times.system)


def _tree_cpu(pid: int) -> float:
    """CPU of a process and of all its children, the live ones and those it has reaped (a
    PostgreSQL backend that exited counts in the postmaster's children times)."""
    import psutil

    root = psutil.Process(pid)
    times = root.cpu_times()
    total = float(times.user + times.system + times.children_user + times.children_system)
    for child in root.children(recursive=True):
        try:
            total += _cpu(child)
        except psutil.NoSuchProcess:
            continue
    return total


def _server_pid(name: str) -> int:
    """The pid of this bench's own server process called ``name`` (its command line names
    the bench's services folder; other servers may run on the machine)."""
    import psutil

    mine = str(LOG_DIR / "services")
    for proc in psutil.process_iter(["name", "cmdline", "ppid"]):
        try:
            if proc.info["name"] != name or mine not in " ".join(proc.info["cmdline"] or ()):
                continue
            if psutil.Process(proc.info["ppid"]).name() != name:
                return int(proc.pid)
        except psutil.NoSuchProcess:
            continue
    raise SystemExit(f"no {name} process of {mine} found")


def _read_cpu(procs: dict[str, int]) -> dict[str, float]:
    return {name: _tree_cpu(pid) for name, pid in procs.items()}


def _read_db(client: Any, cpu: dict[str, float]) -> Reading:
    # Row counters reach pg_stat_user_tables when a backend goes idle (up to 10 s later) or
    # exits: read after the processes stopped and a moment more.
    time.sleep(1.5)
    _sql("SELECT pg_stat_clear_snapshot()")
    (wal,) = _sql("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn")[0]
    inserted, updated, deleted = _sql(ROW_SQL)[0]
    return Reading(int(wal), int(inserted), int(updated), int(deleted), _redis_calls(client), cpu)


def _per(before: Reading, after: Reading, n: int) -> dict[str, float]:
    out = {
        "wal_bytes": (after.wal - before.wal) / n,
        "rows_inserted": (after.inserted - before.inserted) / n,
        "rows_updated": (after.updated - before.updated) / n,
        "rows_deleted": (after.deleted - before.deleted) / n,
        "redis_commands": (after.redis_calls - before.redis_calls) / n,
    }
    for name in after.cpu:
        out[f"cpu_ms_{name}"] = 1000 * (after.cpu[name] - before.cpu.get(name, 0.0)) / n
    return out


def _wait(query: str, target: int, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while _sql(query)[0][0] < target:
        if time.monotonic() > deadline:
            raise SystemExit(f"bench timed out waiting for {what}")
        time.sleep(0.5)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    for proc in procs:
        proc.wait(timeout=120)


def _node_env() -> dict[str, str]:
    """Every claim at its instant, inside the window (module docstring)."""
    return {**os.environ, "SCHEDULER_CLAIM_AHEAD_S": "0"}


def dispatch(firings: int, timeout_s: float) -> dict[str, float]:
    from beat_engine.clock import SystemClock

    anchor = SystemClock().now() + timedelta(seconds=15 + firings // 20_000)
    _seed(firings, anchor=anchor, spread_ms=1, interval_s=86_400, prefix="cost-")
    _sql("UPDATE jobs_tenant SET max_queued_runs = %s", [firings + 10_000])
    client = _broker()
    log = LOG_DIR / "dispatch-node.log"
    log.write_text("")
    node = _spawn([sys.executable, "manage.py", "beat_engine", "--node-id", "cost"], log,
                  _node_env())  # fmt: skip
    watched = {"node": node.pid, **_servers()}
    try:
        time.sleep(max(0.0, (anchor - SystemClock().now()).total_seconds() - 3))
        before = _read_db(client, _read_cpu(watched))
        _wait("SELECT count(*) FROM jobs_jobrun WHERE published_at IS NOT NULL", firings,
              timeout_s, "the spike's published marks")  # fmt: skip
        cpu = _read_cpu(watched)
    finally:
        _stop([node])
    return _per(before, _read_db(client, cpu), firings)


def _servers() -> dict[str, int]:
    return {"postgres": _server_pid("postgres"), "redis": _server_pid("redis-server")}


def execution(runs: int, critical: bool, per_firing: dict[str, float], timeout_s: float
              ) -> dict[str, float]:  # fmt: skip
    from beat_engine.clock import SystemClock

    anchor = SystemClock().now() + timedelta(seconds=20)
    _seed(runs, anchor=anchor, spread_ms=1, interval_s=86_400, prefix="exec-")
    _sql("UPDATE jobs_job SET critical = %s", [critical])
    client = _broker()
    env = _node_env()
    node_log, worker_log = LOG_DIR / "exec-node.log", LOG_DIR / "exec-worker.log"
    node_log.write_text("")
    worker_log.write_text("")
    procs = [
        _spawn([sys.executable, "manage.py", "beat_engine", "--node-id", "cost"], node_log, env),
        _spawn([sys.executable, "-m", "celery", "-A", "scheduler_project", "worker", "--pool",
                "prefork", "--concurrency", "2", "-Q", "scheduler", "--loglevel", "WARNING",
                "-n", "cost@%h", "--without-mingle", "--without-gossip", "--without-heartbeat"],
               worker_log, env),
    ]  # fmt: skip
    watched = {"node": procs[0].pid, "worker": procs[1].pid, **_servers()}
    try:
        time.sleep(max(0.0, (anchor - SystemClock().now()).total_seconds() - 3))
        before = _read_db(client, _read_cpu(watched))
        _wait("SELECT count(*) FROM jobs_jobrun WHERE finished_at IS NOT NULL", runs, timeout_s,
              "every run to finish")  # fmt: skip
        cpu = _read_cpu(watched)
    finally:
        _stop(procs)
    total = _per(before, _read_db(client, cpu), runs)
    # What is left once the dispatch's share is taken away: the execution's own cost.
    out = {key: value - per_firing.get(key, 0.0) for key, value in total.items()}
    out["cpu_ms_worker"] = total["cpu_ms_worker"]
    out.pop("cpu_ms_node", None)
    return out


LABELS = {
    "wal_bytes": "WAL bytes",
    "rows_inserted": "rows inserted",
    "rows_updated": "rows updated",
    "rows_deleted": "rows deleted",
    "redis_commands": "Redis commands",
    "cpu_ms_node": "beat node CPU (ms)",
    "cpu_ms_worker": "worker CPU (ms, all its processes)",
    "cpu_ms_postgres": "PostgreSQL CPU (ms, all its processes)",
    "cpu_ms_redis": "Redis CPU (ms)",
}


def table(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    rows = []
    for key, label in LABELS.items():
        cells = []
        for part in ("dispatch", "execution", "execution_critical"):
            value = result[part].get(key)
            cells.append("" if value is None else f"{value:,.2f}")
        rows.append((label, *cells))
    return rows  # type: ignore[return-value]


def write_docs(result: dict[str, Any]) -> None:
    rows = "\n".join(f"| {label} | {a} | {b} | {c} |" for label, a, b, c in table(result))
    body = (
        f"## {TITLE}\n\n"
        f"Measured {result['measured_at']} UTC on this 2-core machine (load average "
        f"{result['load_before']:.1f} before, {result['load_after']:.1f} after), embedded "
        "PostgreSQL and Redis on Unix sockets. Dispatch: "
        f"{result['firings']:,} firings due at one instant, one beat node, claimed and pushed "
        "(per firing, from just before the instant until every run is marked published; "
        "claims ahead off, so that the claim is inside that window: a claim ahead is the same "
        "statements, earlier). "
        f"Execution: {result['runs']:,} runs of a no-op callable on one worker (prefork, 2 "
        "processes), per run, with the dispatch's per-firing share taken away; critical: the "
        "same with a dedup key written with each success. CPU is user + system time of the "
        "processes named (PostgreSQL: all its processes). docs/scaling.md sizes a deployment "
        "from these figures. Regenerated by the command; not edited by hand.\n"
        f"Command: `{result['command']}`\n\n"
        "| per firing | dispatch | execution | execution, critical |\n"
        f"| --- | ---: | ---: | ---: |\n{rows}\n"
    )
    replace_section(TITLE, body)
    records = []
    for part in ("dispatch", "execution", "execution_critical"):
        for metric, value in result[part].items():
            records.append({"source": SOURCE, "scheduler": "ours-1", "scenario": part,
                            "n": result["firings"] if part == "dispatch" else result["runs"],
                            "metric": metric, "value": value, "unit": "per firing"})  # fmt: skip
    replace_records(SOURCE, records)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--firings", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=2_000)
    parser.add_argument("--timeout-s", type=float, default=900.0)
    parser.add_argument("--write-docs", action="store_true")
    parser.add_argument("--docs-from", type=Path, help="a result.json of an earlier run")
    args = parser.parse_args()
    # The dispatch is measured with no worker: the fixed queue bound, not one sized from a drain
    # rate of zero (docs/limits.md, "The adaptive bound").
    os.environ.setdefault("SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", "0")
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    if args.docs_from:
        write_docs(json.loads(args.docs_from.read_text()))
        return 0
    result: dict[str, Any] = {
        "command": "python " + " ".join(sys.argv), "firings": args.firings, "runs": args.runs,
        "measured_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M}", "load_before": os.getloadavg()[0],
    }  # fmt: skip
    services = _setup(LOG_DIR / "services")
    try:
        result["dispatch"] = dispatch(args.firings, args.timeout_s)
        result["execution"] = execution(args.runs, False, result["dispatch"], args.timeout_s)
        result["execution_critical"] = execution(
            args.runs, True, result["dispatch"], args.timeout_s
        )
    finally:
        services.stop()
    result["load_after"] = os.getloadavg()[0]
    (LOG_DIR / "result.json").write_text(json.dumps(result, indent=1))
    print(f"{'per firing':40} {'dispatch':>12} {'execution':>12} {'exec critical':>14}")
    for label, a, b, c in table(result):
        print(f"{label:40} {a:>12} {b:>12} {c:>14}")
    if args.write_docs:
        write_docs(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
