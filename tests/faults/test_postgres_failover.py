"""PostgreSQL failover under load: a primary with a synchronous streaming standby, a beat node,
a worker and an API client, all given DATABASE_URL listing both hosts with
target_session_attrs=read-write. The primary is SIGKILLed and the standby promoted (the only
operator action); nothing is restarted. Checks that no accepted job and no committed run or
outcome is lost, that the web said 503 (never 500) while no primary was reachable, that each
firing's effect happened once at the target, and that no run is left unfinished.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from scheduler_project.embedded import RedisServer
from tests.support.beat_nodes import ROOT, BeatNode, pause_s
from tests.support.pg_replication import ReplicatedPostgres
from tests.support.waiting import wait_until
from tests.support.workers import (  # noqa: F401  (the http_target fixture)
    CeleryWorker,
    HttpTarget,
    http_target_fixture,
    worker_env,
)

pytestmark = [pytest.mark.faults]

INTERVAL_JOBS = 10
FINAL = ("succeeded", "failed", "dead", "cancelled", "skipped")
FAST = {
    "SCHEDULER_LEASE_TTL_S": "3",
    "SCHEDULER_LEASE_RENEW_S": "0.5",
    "SCHEDULER_LOOKAHEAD_S": "10",
    "SCHEDULER_PUBLISH_SWEEP_AFTER_S": "3",
    "SCHEDULER_RUN_LEASE_S": "5",
    "SCHEDULER_HEARTBEAT_S": "0.5",
    "SCHEDULER_DB_FAILOVER_WINDOW_S": "30",
}


@dataclass
class Scenario:
    db: ReplicatedPostgres
    redis: RedisServer
    target: HttpTarget
    log_dir: Path

    def env(self) -> dict[str, str]:
        env = {
            **worker_env(allowlist=[f"127.0.0.1:{self.target.port}"]),
            **FAST,
            "DATABASE_URL": self.db.url,
            "REDIS_URL": self.redis.url,
            "PYTHONPATH": str(ROOT),
        }
        env.pop("CELERY_BROKER_URL", None)
        return env

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        # Through the same host list: whichever server is the primary answers.
        with psycopg.connect(self.db.url, connect_timeout=5) as conn:
            return list(conn.execute(sql).fetchall())


@pytest.fixture
def scenario(own_redis: RedisServer, http_target: HttpTarget, tmp_path: Path) -> Iterator[Scenario]:
    db = ReplicatedPostgres.create()
    try:
        db.start()
        http_target.requests.clear()
        found = Scenario(db, own_redis, http_target, tmp_path)
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT, env=found.env(), check=True, timeout=120,
        )  # fmt: skip
        yield found
    finally:
        db.stop()


def _succeeded_after(scenario: Scenario, instant: datetime) -> int:
    rows = scenario.query(
        f"SELECT count(*) FROM jobs_jobrun WHERE scheduled_for > '{instant.isoformat()}' "
        "AND state = 'succeeded'"
    )
    return int(rows[0][0])


def _answers(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.timeout(180)
def test_promoting_the_standby_loses_nothing_and_duplicates_nothing(scenario: Scenario) -> None:
    env = scenario.env()
    node = BeatNode("pg-failover", scenario.log_dir, env)
    worker = CeleryWorker(["scheduler"], env, scenario.log_dir / "worker.log")
    answers = scenario.log_dir / "answers.jsonl"
    client: subprocess.Popen[bytes] | None = None
    try:
        worker.start()
        node.start()
        with (scenario.log_dir / "client.log").open("ab") as client_log:
            client = subprocess.Popen(
                [sys.executable, "-m", "tests.support.pg_failover_client", str(answers),
                 scenario.target.url("/ok"), str(INTERVAL_JOBS)],
                cwd=ROOT, env=env, stdout=client_log, stderr=subprocess.STDOUT,
            )  # fmt: skip

        def succeeded() -> int:
            return int(
                scenario.query("SELECT count(*) FROM jobs_jobrun WHERE state = 'succeeded'")[0][0]
            )

        wait_until(lambda: succeeded() >= 30, timeout_s=60, what="a steady load")
        # What was committed just before the primary dies: with synchronous replication the
        # standby has every row of it.
        jobs_before = {row[0] for row in scenario.query("SELECT id FROM jobs_job")}
        runs_before = dict(scenario.query("SELECT id, state FROM jobs_jobrun"))
        attempts_before = set(
            scenario.query(
                "SELECT run_id, attempt, outcome FROM jobs_runattempt WHERE outcome <> ''"
            )
        )
        accepted_before = {a["job_id"] for a in _answers(answers) if a["status"] == 201}
        scenario.db.primary.kill()
        # The outage: no primary for a while, as until a failover tool decides.
        pause_s(2.0)
        scenario.db.promote_standby()
        promoted = scenario.query("SELECT now()")[0][0]
        resumed_at = succeeded()

        def resumed() -> bool:
            # Thirty more successes alone can all be firings the outage delayed (ten jobs firing
            # every second replay theirs at once), finished before any firing due after the
            # promotion was claimed: the load has resumed (the check that the system did) once
            # one of those ran too.
            return succeeded() >= resumed_at + 30 and _succeeded_after(scenario, promoted) > 0

        wait_until(resumed, timeout_s=60, what="the load to resume")
        (answers.with_suffix(".stop")).touch()
        client.wait(timeout=30)
        check_until = scenario.query("SELECT now()")[0][0]

        def settled() -> bool:
            rows = scenario.query(
                "SELECT count(*) FROM jobs_jobrun WHERE scheduled_for <= "
                f"'{check_until.isoformat()}' AND state NOT IN {FINAL}"
            )
            return int(rows[0][0]) == 0

        wait_until(settled, timeout_s=60, what="every run due before the check to finish")
        assert node.process is not None
        assert node.process.poll() is None, "the beat node exited"
        assert worker.process is not None
        assert worker.process.poll() is None, "the worker exited"
    finally:
        if client is not None and client.poll() is None:
            client.kill()
        node.stop()
        worker.stop()

    # No restart: the engine found the new primary itself, and said so.
    assert node.starts == 1
    assert node.events("beat.database_lost")
    # The web answered 503 with Retry-After while no primary was reachable, never 500, and every
    # job it accepted, before or after the failover, exists.
    answered = _answers(answers)
    statuses = Counter(a["status"] for a in answered)
    assert set(statuses) <= {201, 503}, statuses
    assert statuses[503] > 0, "the client never saw the outage"
    assert all(a["retry_after"] for a in answered if a["status"] == 503)
    accepted = {a["job_id"] for a in answered if a["status"] == 201}
    jobs_after = {str(row[0]) for row in scenario.query("SELECT id FROM jobs_job")}
    assert accepted <= jobs_after
    assert accepted_before, "precondition: jobs were accepted before the kill"
    assert accepted_before <= jobs_after
    assert {str(j) for j in jobs_before} <= jobs_after
    # No committed claim or outcome lost: every run and recorded attempt outcome seen before
    # the kill is still there, and a finished run is still finished the same way.
    runs_after = dict(scenario.query("SELECT id, state FROM jobs_jobrun"))
    assert set(runs_before) <= set(runs_after)
    for run_id, state in runs_before.items():
        if state in FINAL:
            assert runs_after[run_id] == state, run_id
    attempts_after = set(scenario.query("SELECT run_id, attempt, outcome FROM jobs_runattempt"))
    assert attempts_before <= attempts_after
    # Every firing of each interval job up to its last one has exactly one run (no gap, no
    # second run), and each run's effect reached the target once.
    for (job_id,) in scenario.query("SELECT id FROM jobs_job WHERE interval_seconds IS NOT NULL"):
        times = [
            row[0]
            for row in scenario.query(
                f"SELECT scheduled_for FROM jobs_jobrun WHERE job_id = '{job_id}' "
                "ORDER BY scheduled_for"
            )
        ]
        gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(times)}
        assert gaps <= {1.0}, (job_id, sorted(gaps))
    keys = Counter(hit["headers"].get("Idempotency-Key") for hit in scenario.target.hits("/ok"))
    duplicates = {key: n for key, n in keys.items() if n > 1}
    assert not duplicates, duplicates
    succeeded_runs = scenario.query(
        f"SELECT count(*) FROM jobs_jobrun WHERE state = 'succeeded' "
        f"AND scheduled_for <= '{check_until.isoformat()}'"
    )
    assert len(keys) >= int(succeeded_runs[0][0])
