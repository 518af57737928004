"""Entry point: ``python -m bench.compare [--quick] [--only NAME ...]`` (see scripts/bench-compare).

Exits non-zero on any error, on duplicates, misses or firings of jobs that were not due of
ours, and on firings of jobs that were not due of a peer (our harness aimed them); never on
timing. A peer's misses and duplicates are printed as findings, not failures (see ``fatal``).
"""

from __future__ import annotations

import argparse
import pickle
import sys
from pathlib import Path

from bench.compare.contender import Contender
from bench.compare.machine import describe_machine
from bench.compare.ours import OURS, engine_available
from bench.compare.peers import PEERS
from bench.compare.runner import NO_HOLDER, PEER_EXIT, RunResult, measure
from bench.compare.services import ROOT, SERVICES_DIR, prepare_databases, services
from bench.compare.timing import expected_duration_s, planned_runs
from bench.compare.workload import PROFILES, Profile


def contenders(only: list[str] | None) -> tuple[list[Contender], list[str]]:
    chosen: list[Contender] = []
    notes = []
    if engine_available(ROOT):
        chosen.extend(OURS.values())
    else:
        notes.append("our engine's `beat_engine` command is not in this checkout; peers only")
    chosen.extend(PEERS.values())
    if only:
        chosen = [c for c in chosen if c.name in only]
    return chosen, notes


def run_all(
    profile: Profile, chosen: list[Contender], env: dict[str, str], scenarios: list[str] | None
) -> list[RunResult]:
    results = []
    by_name = {c.name: c for c in chosen}
    for run in planned_runs(profile, by_name, scenarios):
        contender, case, repetition = by_name[run.scheduler], run.case, run.repetition
        print(f"--> {contender.name}: {case.label} (repetition {repetition + 1})", flush=True)
        # One folder per run: the logs of a failed run are still there afterwards.
        slug = "".join(c if c.isalnum() else "-" for c in case.label)
        out_dir = SERVICES_DIR / "runs" / contender.name / f"{slug}-r{repetition + 1}"
        try:
            if case.scenario == "e2e":
                from bench.compare.e2e import measure_e2e

                result = measure_e2e(contender, case, repetition, out_dir, env)
            else:
                result = measure(contender, case, repetition, out_dir, env)
        except Exception as exc:  # noqa: BLE001 - one failed run is reported, not fatal
            result = RunResult(contender.name, case, repetition, 0.0, 0.0)
            result.error = f"{type(exc).__name__}: {exc}"
        print(f"    {describe(result)}", flush=True)
        results.append(result)
    return results


def describe(result: RunResult) -> str:
    late = result.lateness_s
    if result.case.scenario in ("steady", "failover"):
        parts = [f"published {len(late)} firings"]
    elif result.case.scenario == "e2e":
        parts = [f"executed {len(late)}/{result.case.due} at the target"]
    else:
        parts = [f"published {len(late)}/{result.case.due}"]
    if late:
        parts.append(f"last {late[-1]:.2f}s")
    parts.append(f"dup {result.duplicates} miss {result.misses} unexpected {result.unexpected}")
    stats = result.failover
    if stats is not None:
        resume = stats.resume_s
        parts.append(
            f"resumed {resume:.2f}s after the kill" if resume is not None else "never resumed"
        )
    if result.unstarted:
        parts.append(f"NOT STARTED within {result.case.startup_cap_s:.0f}s")
    if result.error:
        parts.append(f"ERROR {result.error}")
    return ", ".join(parts)


def fatal(result: RunResult) -> bool:
    """Whether a run fails the benchmark (CI included). Any error of ours or of the harness
    fails it, and so do firings of jobs that were not due (our harness aims every scheduler).
    Duplicates and misses fail it for ours only. A peer's are findings about that peer, and so
    are a peer's scheduler process exiting on its own and a failover kill that finds no single
    peer process holding the work (RedBeat's beat loses its 10 s lock during a long tick at
    1,000 firings/s: the standby takes it and ticks too, and the holder's next extend raises
    LockNotOwnedError): printed by ``findings`` and shown in the report, never hidden."""
    ours = result.scheduler.startswith("ours")
    if result.unexpected:
        return True
    if result.error:
        return ours or not result.error.startswith((PEER_EXIT, NO_HOLDER))
    return ours and bool(result.duplicates or result.misses)


def findings(results: list[RunResult]) -> list[str]:
    """Peer runs with misses, duplicates or an exit of their own, exempted by ``fatal``."""
    return [
        f"FINDING (peer, not failing the run) {r.scheduler} {r.case.label}: {describe(r)}"
        for r in results
        if not r.ok and not fatal(r)
    ]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench-compare", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small CI-sized profile")
    parser.add_argument("--only", nargs="*", help="scheduler names to run (default: all)")
    parser.add_argument(
        "--docs", type=Path, default=None,
        help="folder for benchmarks.md/json and img/ (default: docs/ in full mode, "
        ".local/bench-compare/report in quick mode, so CI never rewrites the docs)",
    )  # fmt: skip
    parser.add_argument(
        "--scenarios", nargs="*", choices=("spike", "registrations", "steady", "failover", "e2e"),
        help="scenarios to run (default: all); e.g. `--quick --only ours-2 redbeat "
        "--scenarios failover`",
    )  # fmt: skip
    parser.add_argument(
        "--report-only", action="store_true",
        help="rewrite the report from the last run's saved results without running anything",
    )  # fmt: skip
    args = parser.parse_args(argv)
    profile = PROFILES["quick" if args.quick else "full"]
    docs = args.docs or (SERVICES_DIR / "report" if args.quick else ROOT / "docs")
    chosen, notes = contenders(args.only)
    if not args.report_only:
        runs = planned_runs(profile, [c.name for c in chosen], args.scenarios)
        minutes = expected_duration_s(runs) / 60
        print(f"==> profile {profile.name}: {len(runs)} runs, expected about {minutes:.0f} min",
              flush=True)  # fmt: skip
    saved = SERVICES_DIR / f"results-{profile.name}.pickle"
    if args.report_only:
        # Re-render from the last run's results, e.g. after changing the report's layout.
        machine, notes, results = pickle.loads(saved.read_bytes())
        chosen = [c for c in chosen if any(r.scheduler == c.name for r in results)]
    else:
        with services() as env:
            prepare_databases(env)
            machine = describe_machine(env)
            results = run_all(profile, chosen, env, args.scenarios)
        saved.write_bytes(pickle.dumps((machine, notes, results)))
    from bench.compare.report import write_report

    write_report(profile, chosen, results, notes, machine, docs)
    failed = [r for r in results if fatal(r)]
    for line in findings(results):
        print(line)
    for result in failed:
        print(f"FAILED {result.scheduler} {result.case.label}: {describe(result)}")
    print(f"==> report in {docs}; {len(results) - len(failed)} runs ok, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
