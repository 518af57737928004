"""docs/benchmarks.md (our section only, between markers) and docs/benchmarks.json records."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from bench.compare.contender import Contender
from bench.compare.metrics import FAILOVER_METRICS, Figure, pairwise_ratio, summarise
from bench.compare.runner import RunResult
from bench.compare.workload import CELERY_PEERS, Case, Profile

START = "<!-- compare:start -->"
END = "<!-- compare:end -->"
SOURCE = "bench-compare"
TITLE = "## Compared with celery beat, django-celery-beat and RedBeat"
COLUMNS = (
    ("last_publish", "last msg (s)"),
    ("lateness_p50", "p50 (s)"),
    ("lateness_p99", "p99 (s)"),
    ("lateness_max", "max (s)"),
    ("firings_per_s", "firings/s"),
    ("within_60s", "within 60 s"),
    ("startup", "start-up (s)"),
    ("peak_rss", "peak RSS (MiB)"),
    ("cpu", "CPU (s)"),
    ("duplicates", "dup"),
    ("resent", "re-sent"),
    ("misses", "miss"),
)
RATIO_METRICS = ("last_publish", "lateness_p99", "cpu_per_1000_firings", "peak_rss")
FAILOVER_COLUMNS = (
    ("victim_share", "work killed"),
    ("resume", "resume (s)"),
    ("misses", "missed"),
    ("duplicates", "dup"),
    ("resent", "re-sent"),
    ("lateness_p99_after_kill", "p99 after kill (s)"),
    ("lateness_max_after_kill", "max after kill (s)"),
    ("lateness_p99_settled", "p99 settled (s)"),
    ("firings_per_s", "firings/s"),
)
FAILOVER_RATIOS = ("resume", "lateness_p99_after_kill", "lateness_max_after_kill")
# Records a failover run has figures for; the spike-only ones would all be null.
FAILOVER_RECORDS = FAILOVER_METRICS | {
    "firings_per_s",
    "lateness_p50",
    "lateness_p99",
    "lateness_max",
    "peak_rss",
    "cpu",
    "duplicates",
    "resent",
    "misses",
}


def _fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _cell(figure: Figure) -> str:
    if figure.value is None:
        return "—"
    if figure.repetitions == 1 or figure.minimum == figure.maximum:
        return _fmt(figure.value)
    return f"{_fmt(figure.value)} ({_fmt(figure.minimum)}-{_fmt(figure.maximum)})"


def group(results: list[RunResult]) -> dict[Case, dict[str, list[RunResult]]]:
    grouped: dict[Case, dict[str, list[RunResult]]] = defaultdict(lambda: defaultdict(list))
    for result in results:
        grouped[result.case][result.scheduler].append(result)
    return grouped


def case_table(
    runs_by_scheduler: dict[str, list[RunResult]],
    columns: tuple[tuple[str, str], ...] = COLUMNS,
) -> list[str]:
    lines = [
        "| scheduler | " + " | ".join(title for _, title in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
    ]
    most = max((len(runs) for runs in runs_by_scheduler.values()), default=0)
    for scheduler, runs in runs_by_scheduler.items():
        figures = {f.metric: f for f in summarise(runs)}
        errors = sorted({r.error for r in runs if r.error})
        note = f" (error: {'; '.join(errors)})" if errors else ""
        if len(runs) < most:
            # Slow peers repeat the cases that hold them until the deadline less often.
            note += f" ({len(runs)} repetitions)"
        case = runs[0].case
        unstarted = sum(1 for r in runs if r.unstarted)
        if unstarted:
            note += (
                f" (did not start within {case.startup_cap_s:.0f} s in {unstarted} of "
                f"{len(runs)} runs)"
            )
        unfinished = sum(1 for r in runs if r.misses and not r.error and not r.unstarted)
        if unfinished and case.scenario not in ("steady", "failover"):
            note += (
                f" (did not finish within {case.deadline_s:.0f} s in {unfinished} of "
                f"{len(runs)} runs)"
            )
        cells = " | ".join(_cell(figures[metric]) for metric, _ in columns)
        lines.append(f"| {scheduler}{note} | {cells} |")
    return lines


def ratio_lines(runs_by_scheduler: dict[str, list[RunResult]]) -> list[str]:
    """Ours against the best peer on each metric, pair by pair within this run."""
    lines = []
    for ours in ("ours-1", "ours-2"):
        if ours not in runs_by_scheduler:
            continue
        for metric in RATIO_METRICS:
            best: tuple[float, str] | None = None
            for peer in CELERY_PEERS:
                if peer not in runs_by_scheduler:
                    continue
                figures = {f.metric: f for f in summarise(runs_by_scheduler[peer])}
                value = figures[metric].value
                if value is not None and (best is None or value < best[0]):
                    best = (value, peer)
            if best is None:
                continue
            ratio = pairwise_ratio(runs_by_scheduler[ours], runs_by_scheduler[best[1]], metric)
            lines.append(f"- {ours} / {best[1]} (best peer) on `{metric}`: {_fmt(ratio)}")
    return lines


def failover_ratio_lines(runs_by_scheduler: dict[str, list[RunResult]]) -> list[str]:
    """Ours / RedBeat, the one peer with a takeover, pair by pair within this run."""
    if "ours-2" not in runs_by_scheduler or "redbeat" not in runs_by_scheduler:
        return []
    ours, theirs = runs_by_scheduler["ours-2"], runs_by_scheduler["redbeat"]
    return [
        f"- ours-2 / redbeat on `{metric}`: {_fmt(pairwise_ratio(ours, theirs, metric))}"
        for metric in FAILOVER_RATIOS
    ]


def _records(results: list[RunResult]) -> list[dict[str, object]]:
    records = []
    for runs_by_scheduler in group(results).values():
        for runs in runs_by_scheduler.values():
            for f in summarise(runs):
                failover = f.scenario == "failover"
                if f.metric not in FAILOVER_RECORDS if failover else f.metric in FAILOVER_METRICS:
                    continue
                records.append({
                    "source": SOURCE, "scheduler": f.scheduler, "scenario": f.scenario,
                    "n": f.n, "registered": f.registered, "metric": f.metric,
                    "value": f.value, "unit": f.unit, "repetitions": f.repetitions,
                    "min": f.minimum, "max": f.maximum,
                })  # fmt: skip
    return records


def write_json(path: Path, results: list[RunResult]) -> None:
    """Replace our records in benchmarks.json, keeping those other benchmarks wrote."""
    kept: list[object] = []
    if path.exists():
        existing = json.loads(path.read_text())
        old = existing.get("records", []) if isinstance(existing, dict) else existing
        kept = [r for r in old if not (isinstance(r, dict) and r.get("source") == SOURCE)]
    path.write_text(json.dumps({"records": kept + _records(results)}, indent=1) + "\n")


def splice(path: Path, section: str) -> None:
    """Put our section in place of the previous one, leaving the rest as others wrote it.

    The start marker sits under our heading, not above it: other benchmarks replace their
    own section up to the next "## " heading, which would otherwise swallow the marker.
    """
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    title, body = section.split("\n", 1)
    block = f"{title}\n{START}\n{body.strip()}\n{END}"
    ours = re.compile(rf"^{re.escape(TITLE)}\n.*?{re.escape(END)}", re.S | re.M)
    if ours.search(text):
        text = ours.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def write_report(
    profile: Profile,
    chosen: list[Contender],
    results: list[RunResult],
    notes: list[str],
    machine: dict[str, str],
    docs: Path,
) -> None:
    from bench.compare.method import caveats, how_to_run, method
    from bench.compare.plots import draw_all

    docs.mkdir(parents=True, exist_ok=True)
    images = draw_all(results, docs / "img")
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        TITLE, "",
        f"Generated by `scripts/bench-compare` (`make bench-compare`), profile "
        f"**{profile.name}**, {profile.repetitions} repetition(s), on {when}. "
        "Regenerated by the entry point; do not edit by hand.", "",
        "### Machine and versions", "",
        *[f"- {key}: {value}" for key, value in machine.items()], "",
        "### How to run", "", *how_to_run(), "",
        "### Method", "", *method(chosen), "",
    ]  # fmt: skip
    lines += [f"> {note}" for note in notes] + ([""] if notes else [])
    for case, runs_by_scheduler in group(results).items():
        if case.scenario == "failover":
            lines += [f"### failover: kill -9 at {case.kill_after_s:.0f} s of "
                      f"{case.due // case.period_s:,} firings/s for {case.duration_s:.0f} s "
                      f"({case.due:,} interval jobs, period {case.period_s} s)", ""]  # fmt: skip
            lines += [*case_table(runs_by_scheduler, FAILOVER_COLUMNS), ""]
            lines += [*failover_ratio_lines(runs_by_scheduler), ""]
            continue
        if case.scenario == "steady":
            lines += [f"### steady: {case.due // case.period_s:,} firings/s for "
                      f"{case.duration_s:.0f} s ({case.due:,} interval jobs, period "
                      f"{case.period_s} s)", ""]  # fmt: skip
        else:
            lines += [f"### {case.scenario}: {case.due:,} due, {case.registered:,} registered", ""]
        lines += [*case_table(runs_by_scheduler), ""]
        lines += [*ratio_lines(runs_by_scheduler), ""]
    lines += ["Each cell: median over repetitions (min-max when they differ).", ""]
    lines += ["### Plots", ""] + [f"![{alt}](img/{name})" for name, alt in images] + [""]
    lines += ["### Caveats", "", *caveats(), ""]
    section = "\n".join(lines)
    splice(docs / "benchmarks.md", section)
    write_json(docs / "benchmarks.json", results)
