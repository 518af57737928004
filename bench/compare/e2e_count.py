"""Counting an end-to-end run at its HTTP target: one ledger line per request received.

Pure. A firing is the due job's name (``job-0000042``) carried in the request body; the first
request for it is its execution, every further one a duplicate, and a due name the target
never saw is a miss.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


def ledger_line(firing: str, at: float) -> str:
    """The line the target appends for one request: the firing and when it was served."""
    return f"{firing}\t{at:.6f}"


def parse_ledger(lines: Iterable[str]) -> tuple[list[tuple[str, float]], int]:
    """(firing, time) per request, and how many lines were unreadable (a torn line, a request
    without a firing)."""
    deliveries: list[tuple[str, float]] = []
    bad = 0
    for line in lines:
        if not line.strip():
            continue
        name, _, at = line.rstrip("\n").partition("\t")
        try:
            when = float(at)
        except ValueError:
            bad += 1
            continue
        if not name:
            bad += 1
            continue
        deliveries.append((name, when))
    return deliveries, bad


@dataclass(frozen=True)
class TargetCount:
    duplicates: int
    misses: int
    # Requests for names that were not due, and unreadable lines: the harness aimed nothing
    # else at the target, so either is an error of the run.
    unexpected: int
    # Seconds from the due instant to each due firing's first request, ascending.
    lateness_s: list[float]


def count_at_target(
    deliveries: Iterable[tuple[str, float]], due_names: set[str], due_at: float, bad: int = 0
) -> TargetCount:
    seen: Counter[str] = Counter()
    first: dict[str, float] = {}
    for name, at in deliveries:
        seen[name] += 1
        if name in due_names and (name not in first or at < first[name]):
            first[name] = at
    return TargetCount(
        duplicates=sum(n - 1 for name, n in seen.items() if name in due_names and n > 1),
        misses=len(due_names - first.keys()),
        unexpected=bad + sum(n for name, n in seen.items() if name not in due_names),
        lateness_s=sorted(at - due_at for at in first.values()),
    )
