"""The soak's figures: printed, and with --write-docs its section of docs/benchmarks.md/.json."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from bench.docs_section import BENCHMARKS_MD, replace_section
from bench.soak.cluster import CHILD_SETTINGS
from bench.soak.collect import Findings
from bench.soak.profiles import Profile
from bench.soak.timeline import Observed
from bench.soak.workload import CRITICAL_SHARE, INTERVALS_S, PATH_WEIGHTS, SLOW_S

TITLE = "Soak"
SOURCE = "soak"
BENCHMARKS_JSON = BENCHMARKS_MD.with_suffix(".json")


def _spread(values: tuple[float, float, float] | None) -> str:
    return "—" if values is None else " / ".join(f"{v:.3f}" for v in values)


def _cause(cause: str) -> str:
    return "away from any fault" if cause == "no fault" else f"during a {cause} (+15 s)"


def figures(
    profile: Profile, findings: Findings, observed: Observed, rate: float
) -> dict[str, str]:
    f, r = findings.firings, findings.repeats
    peak = max(observed.samples, key=lambda s: s.broker_messages, default=None)
    return {
        "window (min) / firings per s (schedules)": f"{profile.minutes:g} / {rate:.0f}",
        "faults: beat kills / worker kills / Redis restarts": " / ".join(
            str(observed.faults[k]) for k in ("beat-kill", "worker-kill", "redis-restart")
        ),
        "cancels acknowledged: runs / jobs": (
            f"{findings.cancel_kinds['run']} / {findings.cancel_kinds['job']}"
        ),
        "expected firings": f"{f.expected:,}",
        "applied (effect in the ledger)": f"{f.applied:,}",
        "dead-lettered / cancelled / missed or skipped": (
            f"{f.dead_lettered:,} / {f.cancelled:,} / {f.missed_or_skipped:,}"
        ),
        "**lost firings**": f"{f.lost:,}"
        + (
            f" ({', '.join(f'{s}: {n}' for s, n in f.lost_by_state.most_common())})"
            if f.lost
            else ""
        ),
        "**duplicate effects (critical jobs)**": f"{r.duplicate_effects:,}",
        "critical re-deliveries after a SIGKILL of the delivering worker": f"{r.explained:,}",
        "non-critical firings with two effects (unexplained by a kill)": (
            f"{r.other_keys:,} ({r.other_unexplained:,})"
        ),
        "**attempts after cancel**": f"{len(findings.after_cancel):,}",
        "firings of no schedule (unexpected) / extra runs per firing": (
            f"{f.unexpected:,} / {findings.extra_runs_per_firing:,}"
        ),
        "first publish lateness p50 / p99 / max (s)": _spread(findings.publish_lateness),
        "first start lateness p50 / p99 / max (s)": _spread(findings.start_lateness),
        **{
            f"first publish lateness, due {_cause(cause)}: p50 / p99 / max (s)": _spread(values)
            for cause, values in findings.lateness_by_cause.items()
        },
        "deliveries / attempts / deliveries per s over the window": (
            f"{findings.deliveries:,} / {findings.attempts:,} / "
            f"{findings.deliveries / profile.window_s:.0f}"
        ),
        "peak broker messages (queued runs then)": (
            f"{peak.broker_messages:,} ({peak.queued_runs:,})" if peak else "—"
        ),
        "unexpected process exits (restarted)": (
            ", ".join(f"{k} x{n}" for k, n in observed.unexpected_exits.items()) or "none"
        ),
        "drained after the window (s)": (
            f"{observed.drained_s}"
            if observed.drained_s is not None
            else f"not within {profile.drain_s:.0f} ({observed.unfinished_after_drain} unfinished)"
        ),
    }


def print_report(values: dict[str, str], findings: Findings, notes: list[str]) -> None:
    for key, value in values.items():
        print(f"{key.strip('*'):68} {value}")
    for line in findings.details:
        print(f"  {line}")
    for note in notes:
        print(f"  note: {note}")


def write_timeline(path: Path, observed: Observed, start_epoch: float) -> None:
    """The faults as they ran, in seconds from the first firing and in UTC, next to the logs."""
    lines = [
        f"{at - start_epoch:8.1f}s {datetime.fromtimestamp(at, UTC):%H:%M:%S.%f} {what}"
        for at, what in observed.events
    ]
    path.write_text("\n".join(lines) + "\n")


def _method(profile: Profile) -> str:
    share = {path: f"{100 * weight:g}%" for path, weight in PATH_WEIGHTS.items()}
    intervals = ", ".join(str(i) for i in INTERVALS_S)
    return (
        "Real processes on this 2-core machine (shared with other work): embedded PostgreSQL and "
        f"Redis, {profile.beat_nodes} `manage.py beat_engine` nodes, {profile.workers} Celery "
        f"workers (prefork, {profile.concurrency} processes each; run lease "
        f"{CHILD_SETTINGS['SCHEDULER_RUN_LEASE_S']} s, heartbeat "
        f"{CHILD_SETTINGS['SCHEDULER_HEARTBEAT_S']} s), and a local HTTP target that appends "
        f"every request to its own ledger. Interval jobs ({intervals} s) fire at the stated "
        f"rate; {100 * CRITICAL_SHARE:g}% are critical; {share['/flaky']} answer 503 once, "
        f"{share['/fail']} always 500 (dead-lettered), {share['/slow']} take {SLOW_S:g} s. Beat "
        "nodes and workers are SIGKILLed and restarted and Redis is restarted (same socket and "
        "data folder) at instants drawn from the seed; runs and jobs are cancelled at random, "
        "half through the REST API, half through the services. *Lost*: a firing the schedules "
        "define in the window with no effect in the ledger, not dead-lettered, not cancelled by "
        "the soak and not recorded missed/skipped (a run still unfinished when the drain ends "
        "counts, by its state). *Duplicate effect*: a critical firing the target applied twice, "
        "unless the worker process that sent the earlier request was SIGKILLed before it "
        "recorded the outcome. *Attempt after cancel*: an attempt row that did not exist right "
        "after the cancel was acknowledged. Lateness is measured from `scheduled_for`. The soak "
        "fails on lost firings, duplicate effects or attempts after cancel, never on lateness. "
        "The full profile's default rate is 200 firings/s; on this shared machine two workers "
        "completed about 100 attempts/s (a 3-minute probe at 200/s left a growing backlog), so "
        "the run below used `--rate 80`, within what the workers drain."
    )


def write_docs(
    values: dict[str, str],
    numbers: list[dict[str, object]],
    profile: Profile,
    *,
    command: str,
    commit: str,
    notes: list[str],
) -> None:
    rows = "\n".join(f"| {k} | {v} |" for k, v in values.items())
    method = _method(profile)
    extra = "".join(f"- {note}\n" for note in notes)
    section = (
        f"## {TITLE}\n\n"
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on commit `{commit}`.\n"
        f"Command: `{command}`\n\n{method}\n\n"
        f"| figure | value |\n| --- | --- |\n{rows}\n\n{extra}"
    )
    replace_section(TITLE, section)
    _write_json([{**record, "commit": commit} for record in numbers])


def records(findings: Findings, observed: Observed, profile: Profile) -> list[dict[str, object]]:
    """The figures as numbers, for docs/benchmarks.json."""
    f, r = findings.firings, findings.repeats
    values: list[tuple[str, float | int | None, str]] = [
        ("window", profile.minutes, "min"),
        ("faults", sum(observed.faults.values()), "count"),
        ("expected_firings", f.expected, "count"),
        ("applied", f.applied, "count"),
        ("dead_lettered", f.dead_lettered, "count"),
        ("cancelled", f.cancelled, "count"),
        ("lost", f.lost, "count"),
        ("duplicate_effects", r.duplicate_effects, "count"),
        ("explained_redeliveries", r.explained, "count"),
        ("attempts_after_cancel", len(findings.after_cancel), "count"),
        ("unexpected_firings", f.unexpected, "count"),
    ]
    for name, spread_ in (
        ("publish", findings.publish_lateness),
        ("start", findings.start_lateness),
    ):
        for label, value in zip(("p50", "p99", "max"), spread_ or (None,) * 3, strict=True):
            values.append((f"{name}_lateness_{label}", value, "s"))
    return [
        {"source": SOURCE, "scenario": profile.name, "metric": m, "value": v, "unit": u}
        for m, v, u in values
    ]


def _write_json(records_: list[dict[str, object]]) -> None:
    """Replace this benchmark's records in benchmarks.json, keeping the others'."""
    kept: list[object] = []
    if BENCHMARKS_JSON.exists():
        existing = json.loads(BENCHMARKS_JSON.read_text())
        old = existing.get("records", []) if isinstance(existing, dict) else existing
        kept = [r for r in old if not (isinstance(r, dict) and r.get("source") == SOURCE)]
    Path(BENCHMARKS_JSON).write_text(json.dumps({"records": kept + records_}, indent=1) + "\n")
