"""The soak benchmark's entry point (``bench/soak.py``, ``python -m bench.soak``).

Exits 1 when a firing was lost, a critical job's effect repeated or an attempt started after
a cancel (never on lateness), 2 when the harness itself could not run. Stops by itself after
the window and the drain; SIGTERM or SIGINT stop it early, and every process and server it
started is stopped on the way out.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import signal
import subprocess
import sys
import time
import traceback
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench.soak.cluster import ROOT, Cluster, pool_ready
from bench.soak.plan import Fault, actions, fault_plan
from bench.soak.profiles import Profile, chosen
from bench.soak.seeding import SeededJob
from bench.soak.workload import firing_rate, workload

# Between seeding and the first firing: the nodes and workers start in this time.
LEAD_S = 45.0
READY_TIMEOUT_S = 40.0


class Stopped(Exception):
    pass


def _on_signal(signum: int, frame: object) -> None:
    # Once: a second signal during the cleanup must not interrupt it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stopped(signal.Signals(signum).name)


def _commit() -> str:
    result = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
        capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    return result.stdout.strip() + (" + uncommitted changes" if dirty else "")


def _setup_django(cluster: Cluster) -> None:
    # The harness talks to the same servers, with the same settings, as the processes it runs.
    os.environ.update(cluster.env)
    # No static files are served here; the harness's API calls would warn on each one.
    warnings.filterwarnings("ignore", message="No directory at")
    import django

    django.setup()
    # One line per API call and per pgserver command would bury the soak's own output.
    # The API's throttle logs (with a traceback) each request it serves while Redis is down.
    for name, level in (("jobs.api", logging.ERROR), ("django.request", logging.CRITICAL),
                        ("pgserver", logging.WARNING)):  # fmt: skip
        logging.getLogger(name).setLevel(level)


def _wait_ready(cluster: Cluster, profile: Profile) -> list[str]:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if all(pool_ready(p, profile.concurrency) for p in cluster.pools):
            return []
        time.sleep(0.5)
    return [f"workers not all ready within {READY_TIMEOUT_S:.0f} s of starting"]


@dataclass
class Prepared:
    start: datetime  # the first firing
    tenant_id: int
    api_key: str
    jobs: list[SeededJob]
    rate: float  # what the schedules define, firings per second
    plan: list[Fault]


def _prepare(cluster: Cluster, profile: Profile, seed: int) -> Prepared:
    """Servers, the target, the jobs, then the beat nodes and workers."""
    from beat_engine.clock import SystemClock
    from bench.soak.seeding import migrate_and_reset, seed_jobs

    cluster.start_services()
    port = cluster.start_target()
    _setup_django(cluster)
    migrate_and_reset()
    plans = workload(profile.rate, seed)
    now = SystemClock().now()
    start = (now + timedelta(seconds=LEAD_S)).replace(microsecond=0)
    tenant_id, key, jobs = seed_jobs(plans, start=start, port=port, now=now)
    end_s = profile.window_s - profile.quiet_s
    plan = fault_plan(seed, start_s=profile.warmup_s, end_s=end_s, rules=profile.rules)
    print(
        f"==> {len(jobs)} jobs ({firing_rate(plans):.0f} firings/s) from {start:%H:%M:%S}; "
        f"{len(plan)} faults planned",
        flush=True,
    )
    cluster.start_processes()
    return Prepared(start, tenant_id, key, jobs, firing_rate(plans), plan)


def soak(profile: Profile, seed: int, write_docs: bool, command: str) -> int:
    from beat_engine.clock import SystemClock
    from bench.soak.cancels import Canceller
    from bench.soak.collect import collect
    from bench.soak.report import figures, print_report, records, write_timeline
    from bench.soak.report import write_docs as write_section
    from bench.soak.timeline import drain, run_window

    root = ROOT / ".local" / f"soak-{profile.name}"
    cluster = Cluster(root, profile.beat_nodes, profile.workers, profile.concurrency)
    commit = _commit()
    print(
        f"==> soak {profile.name}: {profile.minutes:g} min at {profile.rate:g}/s, seed {seed}, "
        f"commit {commit}; files in {root}",
        flush=True,
    )
    try:
        ready = _prepare(cluster, profile, seed)
        notes = _wait_ready(cluster, profile)
        if SystemClock().now() > ready.start:
            notes.append("the processes were not ready before the first firing")
        canceller = Canceller(ready.tenant_id, ready.api_key, random.Random(seed + 1))
        observed = run_window(
            cluster, profile, actions(ready.plan), canceller,
            start_epoch=ready.start.timestamp(), tenant_id=ready.tenant_id,
        )  # fmt: skip
        cut = ready.start + timedelta(seconds=profile.window_s)
        print(f"==> window over at {datetime.now(UTC):%H:%M:%S}; draining", flush=True)
        drain(cluster, profile, observed, tenant_id=ready.tenant_id, cut=cut)
        cluster.stop_processes()
        findings = collect(
            ledger=cluster.ledger_path, jobs=ready.jobs, tenant_id=ready.tenant_id,
            start=ready.start, cut=cut, canceller=canceller, observed=observed,
        )  # fmt: skip
        notes += [f"cancel errors: {k} x{n}" for k, n in canceller.errors.items()]
        if findings.unreadable_lines:
            notes.append(f"{findings.unreadable_lines} unreadable ledger lines")
        write_timeline(root / "timeline.txt", observed, ready.start.timestamp())
        values = figures(profile, findings, observed, ready.rate)
        print_report(values, findings, notes)
        if write_docs:
            numbers = records(findings, observed, profile)
            write_section(values, numbers, profile, command=command, commit=commit, notes=notes)
            print("==> wrote the Soak section of docs/benchmarks.md and docs/benchmarks.json")
        return 1 if findings.failed else 0
    finally:
        cluster.stop_all()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/soak.py", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="CI profile: about 2 minutes")
    parser.add_argument("--minutes", type=float, help="window length (default 30, quick 2)")
    parser.add_argument("--rate", type=float, help="firings per second (default 200, quick 40)")
    parser.add_argument("--seed", type=int, default=1, help="draws the faults, jobs and cancels")
    parser.add_argument("--write-docs", action="store_true", help="rewrite the Soak section")
    args = parser.parse_args(argv)
    # Under a minute leaves no room for faults between the warm-up and the quiet end.
    if args.minutes is not None and not 1 <= args.minutes <= 120:
        parser.error("--minutes must be between 1 and 120")
    if args.rate is not None and not 1 <= args.rate <= 2000:
        parser.error("--rate must be between 1 and 2000")
    profile = chosen(args.quick, args.minutes, args.rate)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    command = "python bench/soak.py " + " ".join(argv)
    try:
        return soak(profile, args.seed, args.write_docs, command.strip())
    except Stopped as stop:
        print(f"==> stopped by {stop}; processes and servers stopped", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the harness failed, not the system under test
        traceback.print_exc()
        print(f"==> soak harness error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
