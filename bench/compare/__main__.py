"""Entry point: ``python -m bench.compare [--quick] [--only NAME ...]`` (see scripts/bench-compare).

Exits non-zero on errors, duplicates or firings of jobs that were not due, and on misses in
quick mode (or ours in any mode; RedBeat's failover misses are a finding); never on timing.
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
from bench.compare.runner import RunResult, measure
from bench.compare.services import ROOT, SERVICES_DIR, prepare_databases, services
from bench.compare.workload import PROFILES, Profile, skipped


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
    # Repetition outermost and schedulers innermost: each pair compared is measured minutes
    # apart, not a whole profile apart, so drift on a shared machine hits both alike.
    for repetition in range(profile.repetitions):
        for case in profile.cases:
            if repetition >= case.max_repetitions or (scenarios and case.scenario not in scenarios):
                continue
            for contender in chosen:
                if skipped(case.scenario, contender.name):
                    continue
                print(f"--> {contender.name}: {case.label} (repetition {repetition + 1})",
                      flush=True)  # fmt: skip
                out_dir = SERVICES_DIR / "runs" / contender.name
                try:
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
    if result.error:
        parts.append(f"ERROR {result.error}")
    return ", ".join(parts)


def fatal(result: RunResult, *, quick: bool) -> bool:
    """Errors, duplicates and wrong firings always fail the run; misses fail it in quick mode
    (CI) and for ours, while in the full profile a peer still publishing at the deadline is a
    finding (reported as unfinished), not a failure, and so are RedBeat's failover misses."""
    if result.error or result.duplicates or result.unexpected:
        return True
    if result.case.scenario == "failover" and not result.scheduler.startswith("ours"):
        # RedBeat has no catch-up: firings owed while the lock ran out are lost by design,
        # the very figure the failover table reports.
        return False
    return bool(result.misses) and (quick or result.scheduler.startswith("ours"))


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
        "--scenarios", nargs="*", choices=("spike", "registrations", "steady", "failover"),
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
    failed = [r for r in results if not r.ok and fatal(r, quick=args.quick)]
    for result in failed:
        print(f"FAILED {result.scheduler} {result.case.label}: {describe(result)}")
    print(f"==> report in {docs}; {len(results) - len(failed)} runs ok, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
