"""docs/benchmarks.md (our section only, between markers) and docs/benchmarks.json records."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

from bench.compare.contender import Contender
from bench.compare.metrics import (
    E2E_METRICS,
    FAILOVER_METRICS,
    Figure,
    pairwise_ratio,
    summarise,
)
from bench.compare.runner import RunResult
from bench.compare.workload import (
    CELERY_PEERS,
    E2E_CONCURRENCY,
    E2E_CONTENDERS,
    E2E_TARGET_DELAY_S,
    E2E_WORKERS,
    Case,
    Profile,
)

START = "<!-- compare:start -->"
END = "<!-- compare:end -->"
# The end-to-end subsection, inside ours, so a run of that scenario alone rewrites only it.
E2E_START = "<!-- compare-e2e:start -->"
E2E_END = "<!-- compare-e2e:end -->"
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
E2E_COLUMNS = (
    ("last_executed", "all executed (s)"),
    ("executions_per_s", "executions/s"),
    ("lateness_p50", "p50 (s)"),
    ("lateness_p99", "p99 (s)"),
    ("peak_rss", "peak RSS (MiB)"),
    ("cpu_scheduler", "CPU scheduler (s)"),
    ("cpu_workers", "CPU workers (s)"),
    ("cpu_services", "CPU PostgreSQL+Redis (s)"),
    ("duplicates", "dup"),
    ("misses", "miss"),
)
# Ours within this factor of RedBeat's time while it alone gives its guarantees.
E2E_GOAL = 1.25
E2E_RECORDS = E2E_METRICS | {
    "lateness_p50",
    "lateness_p99",
    "lateness_max",
    "peak_rss",
    "cpu",
    "cpu_per_1000_firings",
    "duplicates",
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


def e2e_ratio_lines(runs_by_scheduler: dict[str, list[RunResult]]) -> list[str]:
    """Ours / RedBeat on the time until every firing executed, against the goal."""
    ours_name, peer = E2E_CONTENDERS
    if ours_name not in runs_by_scheduler or peer not in runs_by_scheduler:
        return []
    ours, theirs = runs_by_scheduler[ours_name], runs_by_scheduler[peer]
    ratio = pairwise_ratio(ours, theirs, "last_executed")
    verdict = ""
    if ratio is not None:
        met = "met" if ratio <= E2E_GOAL else "not met"
        verdict = f" (goal: at most {E2E_GOAL:g}; {met})"
    return [
        f"- {ours_name} / {peer} on `last_executed`: {_fmt(ratio)}{verdict}",
        f"- {ours_name} / {peer} on `cpu` (scheduler and workers): "
        f"{_fmt(pairwise_ratio(ours, theirs, 'cpu'))}",
    ]


def e2e_method(case: Case) -> list[str]:
    """How the end-to-end figures are measured; in the subsection itself, which a run of
    that scenario alone rewrites without the rest of the report."""
    delay_ms = E2E_TARGET_DELAY_S * 1000
    return [
        f"Every firing executed, not only published: {case.due:,} jobs due at one instant "
        f'(registered as in the spike), each POSTing `{{"firing": NAME}}` to a local HTTP '
        f"target (`bench/compare/http_target.py`, 127.0.0.1, a thread per request) that "
        f"answers after {delay_ms:.0f} ms and appends the firing to a ledger. Ours: HTTP-target "
        "jobs run by our workers (`celery -A scheduler_project worker`, executor "
        "`jobs.execute_run`: run claimed, call, outcome recorded, each a compare-and-set). "
        "RedBeat: entries sending a plain Celery task (`bench.http_fire` in "
        "`bench/compare/peer_app.py`) that makes the same call as ours (stdlib `http.client`, a "
        "new connection, `TCP_NODELAY`, JSON body, 30 s timeout), Celery's defaults otherwise "
        "(prefetch 4, early ack), as a RedBeat user runs it. Both: one scheduler process and "
        f"the same {E2E_WORKERS} prefork workers x {E2E_CONCURRENCY} processes "
        f"({E2E_WORKERS * E2E_CONCURRENCY} calls in flight at most: the {delay_ms:.0f} ms "
        f"target alone would allow {E2E_WORKERS * E2E_CONCURRENCY / E2E_TARGET_DELAY_S:,.0f} "
        "calls/s), forked before the scheduler is spawned and before the instant, so worker "
        "start-up is not timed.",
        "",
        "Counted at the target, from its ledger (each line written when a request was served, "
        "after the delay): *all executed* is the due instant to the first serving of the last "
        "due firing, *executions/s* the due firings over "
        "that time, p50/p99 the same lateness per firing; *dup* requests beyond the first for a "
        "firing, *miss* due firings the target never saw within the deadline "
        f"({case.deadline_s:.0f} s). *CPU* (user+system, psutil every 0.5 s, from the "
        "scheduler's spawn to the end): the scheduler process, the workers with their pool "
        "children, and the embedded PostgreSQL and Redis servers with theirs; *peak RSS* is "
        "the scheduler's and workers' summed. The target's own CPU is in neither. Duplicates or "
        "misses of ours fail the benchmark, RedBeat's are findings.",
        "",
    ]


def e2e_lines(case: Case, runs_by_scheduler: dict[str, list[RunResult]]) -> list[str]:
    return [
        f"### e2e: {case.due:,} HTTP-target firings due at one instant, a "
        f"{E2E_TARGET_DELAY_S * 1000:.0f} ms target, {E2E_WORKERS} workers x "
        f"{E2E_CONCURRENCY} processes",
        "",
        *e2e_method(case),
        *case_table(runs_by_scheduler, E2E_COLUMNS),
        "",
        *e2e_ratio_lines(runs_by_scheduler),
        "",
    ]


def _keep(f: Figure) -> bool:
    """Whether a figure is recorded: only the metrics its scenario defines."""
    if f.scenario == "failover":
        return f.metric in FAILOVER_RECORDS
    if f.scenario == "e2e":
        return f.metric in E2E_RECORDS
    return f.metric not in FAILOVER_METRICS | E2E_METRICS


def _records(results: list[RunResult]) -> list[dict[str, object]]:
    records = []
    for runs_by_scheduler in group(results).values():
        for runs in runs_by_scheduler.values():
            for f in summarise(runs):
                if not _keep(f):
                    continue
                records.append({
                    "source": SOURCE, "scheduler": f.scheduler, "scenario": f.scenario,
                    "n": f.n, "registered": f.registered, "metric": f.metric,
                    "value": f.value, "unit": f.unit, "repetitions": f.repetitions,
                    "min": f.minimum, "max": f.maximum,
                })  # fmt: skip
    return records


def _ours(record: object, scenarios: set[str] | None) -> bool:
    if not isinstance(record, dict) or record.get("source") != SOURCE:
        return False
    return scenarios is None or record.get("scenario") in scenarios


def write_json(path: Path, results: list[RunResult], scenarios: set[str] | None = None) -> None:
    """Replace our records in benchmarks.json (only those of ``scenarios`` when given),
    keeping those other benchmarks wrote."""
    kept: list[object] = []
    if path.exists():
        existing = json.loads(path.read_text())
        old = existing.get("records", []) if isinstance(existing, dict) else existing
        kept = [r for r in old if not _ours(r, scenarios)]
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


def splice_e2e(path: Path, lines: list[str]) -> bool:
    """Put the end-to-end subsection in place of the previous one inside our section, or
    before its plots; the rest of the section stays as the last full run wrote it. False
    when there is no section of ours to put it in."""
    text = path.read_text() if path.exists() else ""
    start, end = text.find(f"{TITLE}\n{START}\n"), text.find(END)
    if start < 0 or end < start:
        return False
    block = "\n".join([E2E_START, *lines, E2E_END])
    section = text[start:end]
    pattern = re.compile(rf"{re.escape(E2E_START)}\n.*?{re.escape(E2E_END)}", re.S)
    if pattern.search(section):
        section = pattern.sub(lambda _: block, section, count=1)
    elif "\n### Plots\n" in section:
        section = section.replace("\n### Plots\n", f"\n{block}\n\n### Plots\n", 1)
    else:
        section = section.rstrip("\n") + f"\n\n{block}\n"
    path.write_text(text[:start] + section + text[end:])
    return True


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
    if results and all(r.case.scenario == "e2e" for r in results):
        # The end-to-end scenario alone: its subsection and records, nothing else.
        lines = [line for case, runs in group(results).items() for line in e2e_lines(case, runs)]
        if splice_e2e(docs / "benchmarks.md", lines):
            write_json(docs / "benchmarks.json", results, {"e2e"})
            return
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
        if case.scenario == "e2e":
            lines += [E2E_START, *e2e_lines(case, runs_by_scheduler), E2E_END, ""]
            continue
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
