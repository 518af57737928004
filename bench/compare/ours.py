"""Our engine: `python manage.py beat_engine` nodes, jobs registered as rows in jobs_job."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import redis

from bench.compare.contender import Firing, run_register, spawn
from bench.compare.workload import Case

RUNS_SQL = """
SELECT r.id::text, j.name, extract(epoch FROM r.published_at),
       extract(epoch FROM r.scheduled_for)
  FROM jobs_jobrun r JOIN jobs_job j ON j.id = r.job_id
"""


def engine_available(root: Path) -> bool:
    """Whether this checkout has the engine's ``beat_engine`` command, in whichever app."""
    return any(root.glob("*/management/commands/beat_engine.py"))


@dataclass
class Ours:
    name: str
    nodes: int
    timestamp_meaning: str = (
        "`jobs_jobrun.published_at`, the engine's (database-corrected) clock read right after "
        "the pipelined LPUSH of the batch holding the run returned, so one value per batch"
    )

    def register(self, case: Case, due_at: datetime, env: dict[str, str]) -> None:
        run_register("ours", case, due_at, env)

    def start(
        self, case: Case, due_at: datetime, out_dir: Path, env: dict[str, str]
    ) -> list[subprocess.Popen[bytes]]:
        argv = [sys.executable, "manage.py", "beat_engine"]
        return [
            spawn([*argv, "--node-id", f"bench-{i}"], out_dir, env, f"{self.name}-{i}")
            for i in range(self.nodes)
        ]

    def ready_at(self, out_dir: Path, env: dict[str, str]) -> float | None:
        # The harness polls for the first partition lease (see runner); nothing to read here.
        return None

    def firings(
        self, messages: list[list[object]], out_dir: Path, env: dict[str, str]
    ) -> list[Firing]:
        with psycopg.connect(env["DATABASE_URL"]) as conn:
            rows = {row[0]: row[1:] for row in conn.execute(RUNS_SQL)}
        result = []
        for args in messages:
            name, at, scheduled = rows.get(str(args[0]), (f"unknown-run-{args[0]}", None, None))
            result.append(
                Firing(
                    name,
                    float(at) if at is not None else None,
                    float(scheduled) if scheduled is not None else None,
                )
            )
        return result


def first_lease_seen(env: dict[str, str]) -> bool:
    client = redis.Redis.from_url(env["REDIS_URL"])
    try:
        return bool(client.keys("sched:lease:*"))
    finally:
        client.close()


OURS = {"ours-1": Ours("ours-1", 1), "ours-2": Ours("ours-2", 2)}
