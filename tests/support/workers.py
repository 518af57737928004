"""A real Celery worker subprocess against the test database, a local HTTP target, and waiting."""

from __future__ import annotations

import email.utils
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from kombu import Exchange, Queue

from jobs.models import JobRun, RunAttempt
from jobs.states import AttemptOutcome, RunState
from tests.support.metrics import free_port, scrape, value
from tests.support.waiting import test_database_url, wait_until

ROOT = Path(__file__).resolve().parents[2]
TEST_QUEUE = "scheduler"
# What the local HTTP target's throttling paths ask for in Retry-After.
RETRY_AFTER_S = 7


@dataclass
class CeleryWorker:
    queues: list[str]
    env: dict[str, str]
    log_path: Path
    concurrency: int = 2
    # prefork, threads or gevent (docs/execution.md, "Worker pools").
    pool: str = "prefork"
    # What `python -m` runs: Celery's own command line, or a wrapper of it that injects a fault
    # into the worker process first (tests/support/skewed_celery.py).
    module: str = "celery"
    process: subprocess.Popen[bytes] | None = None
    _log_offset: int = 0
    # The worker host's Prometheus exporter (jobs/worker_metrics.py), on a port of its own.
    metrics_port: int = 0

    def start(self) -> None:
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        if not self.metrics_port:
            self.metrics_port = free_port()
        self.env = {
            **self.env,
            "SCHEDULER_WORKER_METRICS_PORT": str(self.metrics_port),
            "PROMETHEUS_MULTIPROC_DIR": str(self.log_path.parent / f"metrics-{self.metrics_port}"),
        }
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                self.module,
                "-A",
                "scheduler_project",
                "worker",
                "--loglevel",
                "INFO",
                "--pool",
                self.pool,
                "--concurrency",
                str(self.concurrency),
                "-Q",
                ",".join(self.queues),
                "-n",
                f"test-{uuid.uuid4().hex[:8]}@%h",
                "--without-mingle",
                "--without-gossip",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        wait_until(self._ready, timeout_s=60, what=f"celery worker ready ({self.log_path})")

    def _ready(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"worker exited: {self.log_tail()}")
        with self.log_path.open("rb") as fh:
            fh.seek(self._log_offset)
            return b" ready." in fh.read()

    def metric(self, name: str, **labels: str) -> float:
        """A metric of this worker and its pool children, as a scrape of its port reads it."""
        return value(scrape(f"http://127.0.0.1:{self.metrics_port}/metrics"), name, **labels)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def kill(self) -> None:
        """SIGKILL the worker and its pool children: no warm shutdown, no acks."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.kill()


def wait_for_state(run: JobRun, *states: RunState, worker: CeleryWorker) -> JobRun:
    """The run, reloaded once it is in one of ``states``; on time-out, the worker's log."""
    try:
        wait_until(
            lambda: JobRun.objects.get(id=run.id).state in states,
            what=f"run {run.id} to reach {states}",
        )
    except AssertionError:
        raise AssertionError(worker.log_tail()) from None
    return JobRun.objects.get(id=run.id)


def worker_env(*, allowlist: list[str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "DATABASE_URL": test_database_url(),
            "PYTHONPATH": str(ROOT),
            "SCHEDULER_CLIENT_MODULES": "scheduler_project.demo,tests.support.targets",
            "SCHEDULER_HEARTBEAT_S": "0.2",
            "SCHEDULER_RUN_LEASE_S": "5",
            "SCHEDULER_CANCEL_GRACE_S": "0.5",
            "SCHEDULER_HTTP_ALLOWLIST": ",".join(allowlist),
            "CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT": "0",
        }
    )
    return env


def publish_run(run_id: uuid.UUID, attempt: int, queue: str = TEST_QUEUE) -> None:
    """Publish the executor message exactly as the beat engine does."""
    from scheduler_project.celery import app

    target = Queue(queue, Exchange(queue, type="direct"), routing_key=queue)
    app.send_task(
        "jobs.execute_run",
        args=[str(run_id), attempt],
        queue=target,  # type: ignore[arg-type]  # kombu accepts a Queue here
        declare=[target],
    )


def queue_attempt(run: JobRun, *, attempt: int, now: datetime, queue: str = TEST_QUEUE) -> None:
    """Stand-in for the beat engine: move the run to queued as ``attempt`` and publish it."""
    moved = JobRun.objects.filter(id=run.id).update(
        state=RunState.QUEUED, attempt=attempt, queued_at=now, due_at=None, lease_until=None
    )
    assert moved == 1
    publish_run(run.id, attempt, queue)


def reap_lost_attempt(run: JobRun, *, now: datetime, queue: str = TEST_QUEUE) -> int:
    """Stand-in for the engine's reaper: the running attempt's lease is treated as expired."""
    current = JobRun.objects.get(id=run.id)
    assert current.state == RunState.RUNNING
    RunAttempt.objects.filter(run_id=run.id, attempt=current.attempt).update(
        outcome=AttemptOutcome.LOST
    )
    moved = JobRun.objects.filter(
        id=run.id, attempt=current.attempt, state=RunState.RUNNING
    ).update(state=RunState.QUEUED, attempt=current.attempt + 1, queued_at=now, lease_until=None)
    assert moved == 1
    publish_run(run.id, current.attempt + 1, queue)
    return current.attempt + 1


@dataclass
class HttpTarget:
    """A local HTTP target: per-path behaviour, every request recorded for assertions."""

    server: ThreadingHTTPServer
    requests: list[dict[str, Any]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def hits(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]


def _handler(target: HttpTarget) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"null")
            target.requests.append(
                {"path": self.path, "headers": dict(self.headers.items()), "body": body}
            )
            status = {
                "/ok": 200,
                "/unavailable": 503,
                "/missing": 404,
                "/moved": 302,
                "/throttled": 429,
                "/unavailable-until": 503,
                "/throttled-long": 429,
            }
            if self.path == "/slow":
                target.entered.set()
                target.release.wait(60)
                status["/slow"] = 200
            code = status.get(self.path, 500)
            self.send_response(code)
            if code == 302:
                self.send_header("Location", target.url("/ok"))
            retry_after = {
                "/throttled": str(RETRY_AFTER_S),
                "/throttled-long": "86400",
                # An HTTP-date; send_response already added this response's Date.
                "/unavailable-until": email.utils.formatdate(
                    time.time() + RETRY_AFTER_S, usegmt=True
                ),
            }.get(self.path)
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            payload = b"x" * 100_000 if self.path == "/ok" else b"nope"
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                self.wfile.write(payload)
            except OSError:
                return

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


# Module scope, not session: each test module imports these fixtures, and pytest treats each
# import as its own fixture, so a session scope would leave several workers consuming one queue.
@pytest.fixture(scope="module", name="http_target")
def http_target_fixture() -> Iterator[HttpTarget]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    target = HttpTarget(server)
    server.RequestHandlerClass = _handler(target)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield target
    target.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(name="allowed_http_target")
def allowed_http_target_fixture(
    http_target: HttpTarget, monkeypatch: pytest.MonkeyPatch
) -> HttpTarget:
    """The local target, allowlisted in this process as the worker was started with it (local
    servers are refused unless allowlisted explicitly), with its request log emptied."""
    from django.conf import settings

    monkeypatch.setitem(settings.SCHEDULER, "HTTP_ALLOWLIST", [f"127.0.0.1:{http_target.port}"])
    http_target.requests.clear()
    return http_target


@pytest.fixture(scope="module", name="worker")
def worker_fixture(
    django_db_setup: None,
    django_db_blocker: Any,
    http_target: HttpTarget,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CeleryWorker]:
    with django_db_blocker.unblock():
        env = worker_env(allowlist=[f"127.0.0.1:{http_target.port}"])
    worker = CeleryWorker(
        queues=[TEST_QUEUE], env=env, log_path=tmp_path_factory.mktemp("worker") / "worker.log"
    )
    worker.start()
    yield worker
    worker.stop()
