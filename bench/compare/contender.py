"""What the harness needs from a scheduler under test: register, start, and read its record."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from bench.compare.services import ROOT
from bench.compare.workload import Case


@dataclass(frozen=True)
class Firing:
    """One message found in the broker: which job it fires and when it was published."""

    name: str
    published_at: float | None  # wall-clock seconds; None when the scheduler left no record
    # The instant the firing was for, when the scheduler records it (ours); None for peers.
    scheduled_at: float | None = None


class Contender(Protocol):
    name: str
    # Spelled out in the report: what exactly the publish timestamp is for this scheduler.
    timestamp_meaning: str

    def register(self, case: Case, due_at: datetime, env: dict[str, str]) -> None: ...

    def start(
        self, case: Case, due_at: datetime, out_dir: Path, env: dict[str, str]
    ) -> list[subprocess.Popen[bytes]]: ...

    def ready_at(self, out_dir: Path, env: dict[str, str]) -> float | None: ...

    def firings(
        self, messages: list[list[object]], out_dir: Path, env: dict[str, str]
    ) -> list[Firing]: ...


def steady_plan(case: Case, due_at: datetime) -> str:
    from bench.compare.steady import SteadyPlan

    return SteadyPlan(case.due, case.period_s, due_at.timestamp()).to_json()


def run_register(kind: str, case: Case, due_at: datetime, env: dict[str, str]) -> None:
    if case.scenario == "steady":
        argv = ["-m", "bench.compare.steady", kind, steady_plan(case, due_at)]
    else:
        argv = ["-m", "bench.compare.register", kind, str(case.registered), str(case.due),
                due_at.isoformat()]  # fmt: skip
    subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, check=True)


def spawn(argv: list[str], out_dir: Path, env: dict[str, str], tag: str) -> subprocess.Popen[bytes]:
    """A scheduler process in its own session, its output kept for post-mortems."""
    log = (out_dir / f"{tag}.log").open("wb")
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
