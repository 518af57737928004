"""Per-target rate limits end to end: a beat engine (in this process) queues, a real worker
with four pool processes runs, and a local HTTP target records when each request arrived.

Timings are what the target observed, asserted as the bucket's bound (B + R * t in any window
of t seconds) with a stated slack, never as speeds: the test waits for the runs to settle
however long that takes (bounded only so that a hung run fails it).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis
from django.db import connection

from beat_engine.clock import SystemClock
from beat_engine.engine import BeatEngine
from beat_engine.notifications import ChangeFeed
from jobs.models import DecisionReason, Job, JobRun, RunAttempt, TargetLimit, Tenant
from jobs.models_reasons import ReasonKind
from jobs.states import AttemptOutcome, RunState
from tests.support.beat_nodes import make_engine
from tests.support.factories import job_factory, run_factory, tenant_factory
from tests.support.waiting import wait_until
from tests.support.workers import TEST_QUEUE, CeleryWorker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

HOST = "127.0.0.1"
# What a clock edge and the hop from a worker's token to the target's accept may add: the
# token is taken in Redis, the instant recorded where the request arrives, so two requests a
# token apart can arrive closer together by the jitter of that hop. One token, plus the
# tokens of 0.2 s of that jitter.
SLACK_TOKENS = 1
HOP_JITTER_S = 0.2


@dataclass
class RecordingTarget:
    """A loopback HTTP target: (path, arrival on the monotonic clock, run id, attempt) of
    every request; ``/throttle`` answers 429 to the requests numbered in ``refuse``."""

    server: ThreadingHTTPServer
    hits: list[tuple[str, float, str, int]] = field(default_factory=list)
    refuse: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str) -> str:
        return f"http://{HOST}:{self.server.server_address[1]}{path}"

    def of(self, path: str) -> list[tuple[str, float, str, int]]:
        with self.lock:
            return [hit for hit in self.hits if hit[0] == path]


def _handler(target: RecordingTarget) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrived = time.monotonic()
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with target.lock:
                number = len([h for h in target.hits if h[0] == self.path])
                target.hits.append(
                    (
                        self.path,
                        arrived,
                        self.headers.get("X-Scheduler-Run-Id", ""),
                        int(self.headers.get("X-Scheduler-Attempt", "0")),
                    )
                )
            code = 429 if self.path == "/throttle" and number in target.refuse else 200
            body = json.dumps({"n": number}).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture(scope="module", name="target")
def target_fixture() -> Iterator[RecordingTarget]:
    server = ThreadingHTTPServer((HOST, 0), BaseHTTPRequestHandler)
    target = RecordingTarget(server)
    server.RequestHandlerClass = _handler(target)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield target
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module", name="worker")
def worker_fixture(
    django_db_setup: None,
    django_db_blocker: Any,
    target: RecordingTarget,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[CeleryWorker]:
    with django_db_blocker.unblock():
        env = worker_env(allowlist=[f"{HOST}:{target.server.server_address[1]}"])
    env.update(
        {
            # A row created by the test reaches the worker's cache within this.
            "SCHEDULER_TARGET_LIMITS_REFRESH_S": "0.1",
            # The lowered rate holds for the whole test.
            "SCHEDULER_TARGET_COOLDOWN_S": "60",
        }
    )
    worker = CeleryWorker(
        queues=[TEST_QUEUE],
        env=env,
        log_path=tmp_path_factory.mktemp("worker") / "worker.log",
        concurrency=4,
    )
    worker.start()
    yield worker
    worker.stop()


@pytest.fixture(autouse=True)
def _allowlisted(target: RecordingTarget, monkeypatch: pytest.MonkeyPatch) -> None:
    """The local target, allowlisted in this process as the worker was started with it."""
    from django.conf import settings

    port = target.server.server_address[1]
    monkeypatch.setitem(settings.SCHEDULER, "HTTP_ALLOWLIST", [f"{HOST}:{port}"])


@pytest.fixture(name="engine")
def engine_fixture(worker: CeleryWorker) -> Iterator[BeatEngine]:
    """One beat node ticking on a thread of its own: its timers queue the waiting runs."""
    node = make_engine(SystemClock())
    node.feed = ChangeFeed(redis.Redis.from_url(node.config.redis_url))
    stop = threading.Event()

    def run() -> None:
        try:
            node.run(stop)
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="engine", daemon=True)
    thread.start()
    yield node
    stop.set()
    thread.join(timeout=30)


def _now() -> datetime:
    return SystemClock().now()


def _limited(tenant: Tenant, *, rate: float, burst: int) -> None:
    now = _now()
    TargetLimit.objects.create(
        tenant=tenant, target=HOST, rate_per_s=rate, burst=burst, created_at=now, updated_at=now
    )
    # Each worker process re-reads its rows when its copy is older than 0.1 s (monotonic
    # clock): after this, none can start a run on a copy read before the row was committed.
    SystemClock().sleep(0.3)


def _burst_of_runs(tenant: Tenant, url: str, count: int) -> tuple[Job, list[uuid.UUID]]:
    """``count`` runs of one job, all due now (a one-off far ahead keeps the schedule quiet)."""
    now = _now()
    job = job_factory(
        tenant,
        target_kind="http",
        target_name="",
        target_url=url,
        run_at=now + timedelta(days=1),
        max_attempts=2,
        now=now,
    )
    runs = [
        run_factory(job, scheduled_for=now - timedelta(seconds=i + 1), due_at=now).id
        for i in range(count)
    ]
    return job, runs


def _settled(runs: list[uuid.UUID], worker: CeleryWorker) -> list[JobRun]:
    def done() -> bool:
        return JobRun.objects.filter(id__in=runs, state=RunState.SUCCEEDED).count() == len(runs)

    try:
        wait_until(done, timeout_s=60, what=f"{len(runs)} runs to succeed")
    except AssertionError:
        states = list(JobRun.objects.filter(id__in=runs).values_list("state", "last_error"))
        raise AssertionError(f"{states}\n{worker.log_tail()}") from None
    return list(JobRun.objects.filter(id__in=runs))


def _most_in_window(instants: list[float], window_s: float) -> int:
    instants = sorted(instants)
    return max(
        sum(1 for t in instants[i:] if t < start + window_s) for i, start in enumerate(instants)
    )


def _assert_once_each(runs: list[JobRun], hits: list[tuple[str, float, str, int]]) -> None:
    # 0 lost, 0 duplicates, and no attempt spent on waiting: attempt 1 of every run succeeded.
    assert sorted(hit[2] for hit in hits) == sorted(str(run.id) for run in runs)
    assert {run.attempt for run in runs} == {1}
    attempts = RunAttempt.objects.filter(run_id__in=[run.id for run in runs])
    assert sorted(attempts.values_list("attempt", "outcome")) == [
        (1, AttemptOutcome.SUCCEEDED)
    ] * len(runs)


def test_a_burst_reaches_the_target_no_faster_than_its_bucket(
    worker: CeleryWorker, engine: BeatEngine, target: RecordingTarget
) -> None:
    rate, burst, count = 4.0, 3, 20
    tenant = tenant_factory()
    _limited(tenant, rate=rate, burst=burst)
    job, run_ids = _burst_of_runs(tenant, target.url("/limited"), count)
    runs = _settled(run_ids, worker)
    hits = target.of("/limited")
    _assert_once_each(runs, [hit for hit in hits if hit[2] in {str(r) for r in run_ids}])
    instants = [hit[1] for hit in hits]
    for window_s in (0.25, 1.0, 2.0, 4.0):
        most = _most_in_window(instants, window_s)
        bound = burst + rate * (window_s + HOP_JITTER_S) + SLACK_TOKENS
        assert most <= bound, (window_s, most, bound)
    # Held back, not failed: the waits are recorded as the firings' reasons.
    waited = DecisionReason.objects.filter(job=job, kind=ReasonKind.DEFERRED_TARGET_LIMIT)
    assert waited.count() >= 1
    assert worker.metric("scheduler_retries_total", target_kind="http") == 0
    assert worker.metric(
        "scheduler_target_runs_held_total", tenant=str(tenant.id), target=HOST, reason="limit"
    ) == sum(waited.values_list("count", flat=True))


def test_429s_lower_the_targets_rate_and_count_as_no_failure(
    worker: CeleryWorker, engine: BeatEngine, target: RecordingTarget
) -> None:
    rate, count = 4.0, 14
    # The 7th request is refused: six at the configured rate before it, the rest after, at the
    # rate the refusal left (one answer, so one halving).
    target.refuse = {6}
    tenant = tenant_factory()
    _limited(tenant, rate=rate, burst=1)
    job, run_ids = _burst_of_runs(tenant, target.url("/throttle"), count)
    runs = _settled(run_ids, worker)
    hits = sorted(target.of("/throttle"), key=lambda hit: hit[1])
    assert len(hits) == count + len(target.refuse)
    before = [hit[1] for hit in hits[:6]]
    after = [hit[1] for hit in hits[7:]]
    rate_before = (len(before) - 1) / (before[-1] - before[0])
    rate_after = (len(after) - 1) / (after[-1] - after[0])
    assert rate_after < rate_before, (rate_before, rate_after)
    # Lowered to half: a burst of one at 2/s spaces the requests half a second apart, less the
    # jitter of the hop to the target.
    gaps = len(after) - 1
    assert rate_after <= gaps / (gaps / (rate / 2) - HOP_JITTER_S), rate_after
    # Every run succeeded once, on attempt 1: the refused requests were waits, not attempts.
    throttled = DecisionReason.objects.filter(job=job, kind=ReasonKind.THROTTLED_BY_TARGET)
    assert sum(throttled.values_list("count", flat=True)) == len(target.refuse)
    assert {run.attempt for run in runs} == {1}
    attempts = RunAttempt.objects.filter(run_id__in=run_ids)
    assert sorted(attempts.values_list("outcome", flat=True)) == [AttemptOutcome.SUCCEEDED] * count
    assert worker.metric("scheduler_retries_total", target_kind="http") == 0
    lowered = worker.metric("scheduler_target_rate_per_second", tenant=str(tenant.id), target=HOST)
    assert lowered == rate / 2
