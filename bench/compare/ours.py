"""Our engine: `python manage.py beat_engine` nodes, jobs registered as rows in jobs_job."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
import redis

from bench.compare.contender import Firing, Victim, run_register, spawn
from bench.compare.workload import FAILOVER_LEASE_S, FAILOVER_RENEW_S, Case

RUNS_SQL = """
SELECT r.id::text, j.name,
       -- The first push: published_at holds the latest, and runs that no worker starts (none
       -- runs here) are pushed again after republish_after_s (60 s); lateness keeps the first.
       extract(epoch FROM COALESCE(r.due_at + r.lateness, r.published_at)),
       extract(epoch FROM r.scheduled_for), j.partition
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
        "the run's first push, `due_at + lateness` (`published_at` holds the latest push), "
        "the engine's (database-corrected) clock read right after the pipelined LPUSH of the "
        "batch holding the run returned, so one value per batch"
    )

    def register(self, case: Case, due_at: datetime, env: dict[str, str]) -> None:
        run_register("ours", case, due_at, env)

    def start(
        self, case: Case, due_at: datetime, out_dir: Path, env: dict[str, str]
    ) -> list[subprocess.Popen[bytes]]:
        argv = [sys.executable, "manage.py", "beat_engine"]
        if case.scenario != "e2e":
            # No worker reads the queue here and the harness counts every message: the fixed
            # queue bound, not one sized from a drain rate of zero. End to end, workers drain
            # it, and the default bound (sized from their drain rate) applies.
            env = {**env, "SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S": "0"}
        if case.scenario == "failover":
            env = {
                **env,
                "SCHEDULER_LEASE_TTL_S": str(FAILOVER_LEASE_S),
                "SCHEDULER_LEASE_RENEW_S": str(FAILOVER_RENEW_S),
            }
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
            unknown = (f"unknown-run-{args[0]}", None, None, None)
            name, at, scheduled, partition = rows.get(str(args[0]), unknown)
            result.append(
                Firing(
                    name,
                    float(at) if at is not None else None,
                    float(scheduled) if scheduled is not None else None,
                    int(partition) if partition is not None else None,
                    str(args[0]),
                )
            )
        return result

    def victim(self, out_dir: Path, env: dict[str, str]) -> Victim | None:
        """The node holding the most partition leases right now."""
        client = redis.Redis.from_url(env["REDIS_URL"])
        try:
            keys = client.keys("sched:lease:*")
            owners = client.mget(keys) if keys else []
        finally:
            client.close()
        leases = {
            int(key.decode().rsplit(":", 1)[1]): owner.decode()
            for key, owner in zip(keys, owners, strict=True)
            if owner is not None
        }
        return pick_victim(leases, [f"bench-{i}" for i in range(self.nodes)])


def pick_victim(leases: dict[int, str], nodes: list[str]) -> Victim | None:
    """The node owning most partitions (``leases``: partition -> owner node id)."""
    if not leases:
        return None
    counts = {node: sum(1 for owner in leases.values() if owner == node) for node in nodes}
    node = max(nodes, key=lambda n: counts[n])
    if not counts[node]:
        return None
    owned = frozenset(p for p, owner in leases.items() if owner == node)
    return Victim(nodes.index(node), owned, len(owned) / len(leases))


def first_lease_seen(env: dict[str, str]) -> bool:
    client = redis.Redis.from_url(env["REDIS_URL"])
    try:
        return bool(client.keys("sched:lease:*"))
    finally:
        client.close()


OURS = {"ours-1": Ours("ours-1", 1), "ours-2": Ours("ours-2", 2)}
