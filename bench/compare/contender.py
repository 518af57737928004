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
    # Our job's partition (failover: was it the killed node's work?); None for peers.
    partition: int | None = None
    # Our run's id (ours only): a run sent twice is one firing, see runner.collapse_resent.
    run_id: str | None = None


@dataclass(frozen=True)
class Victim:
    """The process a failover run kills, and the work it held (None: all of it)."""

    index: int
    partitions: frozenset[int] | None
    share: float  # fraction of the work it held when killed


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

    def victim(self, out_dir: Path, env: dict[str, str]) -> Victim | None: ...


def steady_plan(case: Case, due_at: datetime) -> str:
    from bench.compare.steady import SteadyPlan

    # Failover: our killed node's firings are replayed by the survivor (replay_all); the
    # default policy, skip, would fire only the latest of those missed while the lease ran out.
    catchup = "replay_all" if case.scenario == "failover" else "skip"
    return SteadyPlan(case.due, case.period_s, due_at.timestamp(), catchup).to_json()


def run_register(kind: str, case: Case, due_at: datetime, env: dict[str, str]) -> None:
    if case.scenario in ("steady", "failover"):
        argv = ["-m", "bench.compare.steady", kind, steady_plan(case, due_at)]
    else:
        argv = ["-m", "bench.compare.register", kind, str(case.registered), str(case.due),
                due_at.isoformat()]  # fmt: skip
        if case.scenario == "e2e":
            argv.append(env["BENCH_TARGET_URL"])
    subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, check=True)


def spawn(argv: list[str], out_dir: Path, env: dict[str, str], tag: str) -> subprocess.Popen[bytes]:
    """A scheduler process in its own session, its output kept for post-mortems."""
    log = (out_dir / f"{tag}.log").open("wb")
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
