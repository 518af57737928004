"""PNG plots (matplotlib, Agg): lateness CDF, firings per second over time, RSS by jobs."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from bench.compare.runner import RunResult


def _largest_spike(results: list[RunResult]) -> list[RunResult]:
    """First repetition of each scheduler in the largest spike case."""
    spikes = [r for r in results if r.case.scenario == "spike" and r.lateness_s]
    if not spikes:
        return []
    biggest = max(r.case.due for r in spikes)
    firsts: dict[str, RunResult] = {}
    for run in spikes:
        if run.case.due == biggest:
            firsts.setdefault(run.scheduler, run)
    return list(firsts.values())


def lateness_cdf(results: list[RunResult], path: Path) -> bool:
    runs = _largest_spike(results)
    if not runs:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        late = run.lateness_s
        fractions = [(i + 1) / run.case.due for i in range(len(late))]
        ax.step([max(x, 1e-3) for x in late], fractions, where="post", label=run.scheduler)
    ax.set_xscale("log")
    ax.set_xlabel("publish lateness (s, log scale)")
    ax.set_ylabel("fraction of due jobs published")
    ax.set_title(f"Spike: {runs[0].case.due:,} jobs due at once")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def firings_over_time(results: list[RunResult], path: Path) -> bool:
    runs = _largest_spike(results)
    if not runs:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        per_second: dict[int, int] = defaultdict(int)
        for late in run.lateness_s:
            per_second[int(late)] += 1
        seconds = range(min(per_second), max(per_second) + 1)
        ax.plot(list(seconds), [per_second[s] for s in seconds], label=run.scheduler)
    ax.set_xlabel("seconds after the due instant")
    ax.set_ylabel("messages published in that second")
    ax.set_yscale("log")
    ax.set_title(f"Spike: firings per second ({runs[0].case.due:,} due)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def rss_by_registered(results: list[RunResult], path: Path) -> bool:
    points: dict[str, dict[int, float]] = defaultdict(dict)
    for run in results:
        if run.case.scenario == "e2e":
            # Its RSS includes the workers: not the scheduler's alone.
            continue
        peak = max((s.rss_bytes for s in run.samples), default=0) / 2**20
        if peak:
            known = points[run.scheduler].get(run.case.registered, 0.0)
            points[run.scheduler][run.case.registered] = max(known, peak)
    if not points:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for scheduler, by_n in points.items():
        ns = sorted(by_n)
        ax.plot(ns, [by_n[n] for n in ns], marker="o", label=scheduler)
    ax.set_xscale("log")
    ax.set_xlabel("registered jobs (log scale)")
    ax.set_ylabel("peak RSS of the scheduler (MiB)")
    ax.set_title("Memory against registered jobs")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def steady_over_time(results: list[RunResult], path: Path) -> bool:
    """Firings per second and the p99 lateness of each second, for the steady runs."""
    runs: dict[str, RunResult] = {}
    for run in results:
        if run.case.scenario == "steady" and run.timeline:
            runs.setdefault(run.scheduler, run)
    if not runs:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    for scheduler, run in runs.items():
        buckets: dict[int, list[float]] = defaultdict(list)
        for at, late in run.timeline:
            buckets[int(at - run.due_at)].append(late)
        seconds = sorted(buckets)
        top.plot(seconds, [len(buckets[s]) for s in seconds], label=scheduler)
        p99 = [sorted(buckets[s])[max(0, int(0.99 * len(buckets[s])) - 1)] for s in seconds]
        bottom.plot(seconds, [max(x, 1e-3) for x in p99], label=scheduler)
    rate = next(iter(runs.values())).case
    top.set_title(f"Steady: {rate.due // rate.period_s:,} firings/s asked")
    top.set_ylabel("firings published")
    bottom.set_ylabel("p99 lateness (s, log)")
    bottom.set_yscale("log")
    bottom.set_xlabel("seconds after the first due instant")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def failover_around_kill(results: list[RunResult], path: Path) -> bool:
    """Firings published per second, seconds relative to the kill -9 of the holder."""
    runs: dict[str, RunResult] = {}
    for run in results:
        if run.case.scenario == "failover" and run.timeline and run.kill_at is not None:
            runs.setdefault(run.scheduler, run)
    if not runs:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for scheduler, run in runs.items():
        kill_at = run.kill_at or 0.0
        per_second: dict[int, int] = defaultdict(int)
        for at, _ in run.timeline:
            per_second[int((at - kill_at) // 1)] += 1
        seconds = range(min(per_second), max(per_second) + 1)
        ax.plot(list(seconds), [per_second[s] for s in seconds], label=scheduler)
    ax.axvline(0, color="red", linestyle="--", linewidth=1, label="kill -9 of the holder")
    case = next(iter(runs.values())).case
    ax.set_title(f"Failover: {case.due // case.period_s:,} firings/s asked")
    ax.set_xlabel("seconds after the kill")
    ax.set_ylabel("firings published in that second")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def draw_all(results: list[RunResult], img_dir: Path) -> list[tuple[str, str]]:
    """Draw every plot the results allow; returns (file name, alt text) of those drawn."""
    img_dir.mkdir(parents=True, exist_ok=True)
    drawn = []
    for name, alt, draw in (
        ("compare-spike-lateness-cdf.png", "Lateness CDF in the spike", lateness_cdf),
        ("compare-spike-firings-per-second.png", "Firings per second", firings_over_time),
        ("compare-rss-by-registered.png", "Peak RSS against registered jobs", rss_by_registered),
        ("compare-steady-over-time.png", "Steady rate and lateness over time", steady_over_time),
        ("compare-failover.png", "Firings per second around the kill", failover_around_kill),
    ):
        if draw(results, img_dir / name):
            drawn.append((name, alt))
    return drawn
