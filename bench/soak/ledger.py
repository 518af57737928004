"""The HTTP target's ledger: one JSON line per request it received, read back as deliveries.

Pure. A delivery answered 2xx is an *effect*; 503 and 500 answers (the flaky and failing paths)
are attempts that did nothing.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from bench.soak.workload import FiringKey, firing_key


@dataclass(frozen=True)
class Delivery:
    job_id: str
    scheduled_for: str
    run_id: str
    attempt: int
    status: int
    at: float  # epoch seconds when the target received the request
    idempotency_key: str

    @property
    def key(self) -> FiringKey:
        return firing_key(self.job_id, self.scheduled_for)

    @property
    def effect(self) -> bool:
        return 200 <= self.status < 300


def ledger_line(headers: dict[str, str], status: int, at: float) -> str:
    """The line the target appends for one request (the scheduler's headers, see
    docs/execution.md "Targets")."""
    return json.dumps(
        {
            "job": headers.get("X-Scheduler-Job-Id", ""),
            "scheduled_for": headers.get("X-Scheduler-Scheduled-For", ""),
            "run": headers.get("X-Scheduler-Run-Id", ""),
            "attempt": int(headers.get("X-Scheduler-Attempt") or 0),
            "status": status,
            "at": at,
            "key": headers.get("Idempotency-Key", ""),
        },
        separators=(",", ":"),
    )


def parse_ledger(lines: Iterable[str]) -> tuple[list[Delivery], int]:
    """Deliveries, and how many lines were unreadable (a torn last line, a request without the
    scheduler's headers)."""
    deliveries, bad = [], 0
    for line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            delivery = Delivery(
                job_id=str(row["job"]),
                scheduled_for=str(row["scheduled_for"]),
                run_id=str(row["run"]),
                attempt=int(row["attempt"]),
                status=int(row["status"]),
                at=float(row["at"]),
                idempotency_key=str(row["key"]),
            )
            delivery.key  # noqa: B018 - validates scheduled_for
        except (ValueError, KeyError, TypeError):
            bad += 1
            continue
        deliveries.append(delivery)
    return deliveries, bad


def effects_by_key(deliveries: Iterable[Delivery]) -> dict[FiringKey, list[Delivery]]:
    """The 2xx deliveries of each firing, in the order the target received them."""
    found: dict[FiringKey, list[Delivery]] = defaultdict(list)
    for delivery in sorted(deliveries, key=lambda d: d.at):
        if delivery.effect:
            found[delivery.key].append(delivery)
    return dict(found)
