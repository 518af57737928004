"""Every process kind serves its Prometheus metrics as Prometheus scrapes them: a beat node on its
own port, a worker host on its port (its prefork children's values added up), the web at
/metrics under gunicorn (multiprocess mode)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings

from beat_engine.clock import SystemClock
from jobs.models import JobRun
from jobs.states import RunState
from tests.support.beat_nodes import ROOT, BeatNode
from tests.support.factories import job_factory, run_factory, tenant_factory
from tests.support.metrics import free_port, scrape, value
from tests.support.waiting import test_database_url, wait_until
from tests.support.workers import (
    CeleryWorker,
    http_target_fixture,  # noqa: F401  (fixture)
    publish_run,
    worker_fixture,  # noqa: F401  (fixture)
)

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]


def test_a_beat_node_serves_its_leases_claims_lags_and_queue_depth(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    now = SystemClock().now()
    tenant = tenant_factory(now=now)
    # Due within the node's first seconds, on a queue no worker reads: its message stays.
    job_factory(tenant, interval=timedelta(seconds=1), queue="metrics-probe", now=now)
    port = free_port()
    node = BeatNode(
        "metrics-node",
        tmp_path,
        env_overrides={"SCHEDULER_BEAT_METRICS_PORT": str(port), "SCHEDULER_LEASE_RENEW_S": "0.5"},
    )
    node.start()
    url = f"http://127.0.0.1:{port}/metrics"
    partitions = settings.SCHEDULER["PARTITIONS"]

    def served() -> bool:
        try:
            samples = scrape(url)
        except OSError:
            return False
        return (
            value(samples, "scheduler_partitions_owned") == partitions
            and value(samples, "scheduler_queue_depth", queue="metrics-probe") >= 1
            and value(samples, "scheduler_partition_lease_renewals_total") >= partitions
        )

    try:
        wait_until(served, timeout_s=30, what="the node's metrics")
        samples = scrape(url)
    finally:
        node.stop()
    assert value(samples, "scheduler_partitions") == partitions
    assert value(samples, "scheduler_partition_leases_acquired_total") == partitions
    assert value(samples, "scheduler_firings_claimed_total") >= 1
    assert value(samples, "scheduler_runs_published_total") >= 1
    assert value(samples, "scheduler_publish_lag_seconds_count", queue="metrics-probe") >= 1
    assert value(samples, "scheduler_tick_duration_seconds_count") >= 1
    assert value(samples, "scheduler_claim_duration_seconds_count") >= 1


def test_a_worker_host_adds_up_its_pool_children(worker: CeleryWorker) -> None:
    now = SystemClock().now()
    job = job_factory(target_name="demo.heartbeat", now=now)
    finished = worker.metric("scheduler_runs_finished_total", outcome="succeeded")
    started = worker.metric("scheduler_start_lag_seconds_count", queue=job.queue)
    durations = worker.metric("scheduler_run_duration_seconds_count", target_kind="callable")
    prompt = worker.metric("scheduler_start_lag_seconds_bucket", queue=job.queue, le="0.5")
    runs = [
        run_factory(
            job,
            scheduled_for=now - timedelta(seconds=i + 1),
            state=RunState.QUEUED,
            attempt=1,
            queued_at=now,
        )
        for i in range(4)
    ]
    for run in runs:
        publish_run(run.id, 1)

    def done() -> bool:
        return JobRun.objects.filter(job=job, state=RunState.SUCCEEDED).count() == len(runs)

    wait_until(done, timeout_s=60, what="four runs")
    # Both pool children ran some (concurrency 2); the host's one port counts them all.
    assert worker.metric("scheduler_runs_finished_total", outcome="succeeded") == finished + 4
    assert worker.metric("scheduler_start_lag_seconds_count", queue=job.queue) == started + 4
    assert (
        worker.metric("scheduler_run_duration_seconds_count", target_kind="callable")
        == durations + 4
    )
    # Each started at least a second after it was due: none falls in the 0.5 s bucket.
    assert worker.metric("scheduler_start_lag_seconds_bucket", queue=job.queue, le="0.5") == prompt


@pytest.fixture
def gunicorn(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    metrics_dir = tmp_path / "web-metrics"
    metrics_dir.mkdir()
    # Left by an earlier run of the web: emptied when the arbiter starts.
    (metrics_dir / "counter_999999.db").write_bytes(b"\0" * 16)
    port = free_port()
    env = dict(
        os.environ,
        DATABASE_URL=test_database_url(),
        REDIS_URL=settings.REDIS_URL,
        PROMETHEUS_MULTIPROC_DIR=str(metrics_dir),
    )
    cmd = [
        sys.executable, "-m", "gunicorn", "-c", "python:scheduler_project.gunicorn_conf",
        "--bind", f"127.0.0.1:{port}", "--workers", "2", "scheduler_project.wsgi",
    ]  # fmt: skip
    web = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        yield f"http://127.0.0.1:{port}/metrics", metrics_dir
    finally:
        web.terminate()
        web.wait(timeout=30)


def test_the_web_serves_metrics_of_all_its_gunicorn_workers(gunicorn: tuple[str, Path]) -> None:
    url, metrics_dir = gunicorn

    def up() -> bool:
        try:
            scrape(url)
        except OSError:
            return False
        return True

    wait_until(up, timeout_s=30, what="gunicorn to answer /metrics")
    samples = scrape(url)
    assert not (metrics_dir / "counter_999999.db").exists()
    # Read from the value files (multiprocess mode, which keeps no _created series), not from
    # the answering worker's own memory.
    assert list(metrics_dir.glob("counter_*.db"))
    assert ("scheduler_dead_letter_replays_created", frozenset()) not in samples
    assert ("scheduler_dead_letter_replays_total", frozenset()) in samples
    assert value(samples, "scheduler_dead_letter_replays_total") == 0


def test_metric_names_never_carry_a_job_or_run_id(worker: CeleryWorker) -> None:
    samples = scrape(f"http://127.0.0.1:{worker.metrics_port}/metrics")
    for _name, labels in samples:
        for _label, label_value in labels:
            with pytest.raises(ValueError, match="badly formed"):
                uuid.UUID(label_value)


def test_a_prefork_worker_with_a_metrics_port_but_no_directory_refuses_to_start() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env["SCHEDULER_WORKER_METRICS_PORT"] = str(free_port())
    cmd = [
        sys.executable, "-m", "celery", "-A", "scheduler_project", "worker", "--pool", "prefork",
        "--concurrency", "1", "-Q", "metrics-unread", "--without-mingle", "--without-gossip",
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "needs PROMETHEUS_MULTIPROC_DIR" in done.stdout + done.stderr
