"""One measured run: register a case, start the scheduler, sample it, count what it published."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import redis

from beat_engine.priority_order import BROKER_STEPS
from bench.compare.contender import Contender, Firing, Victim
from bench.compare.ours import first_lease_seen
from bench.compare.timing import due_instant
from bench.compare.workload import Case

if TYPE_CHECKING:
    # Only for the annotation: failover imports metrics, which imports this module.
    from bench.compare.failover import FailoverStats

# Lists the messages can land in: Celery's default queue for the peers; our engine's queue
# and its priority lists (kombu's Redis transport keeps one list per priority step).
QUEUE_KEYS = ("celery", "scheduler",
              *(f"scheduler\x06\x16{step}" for step in BROKER_STEPS if step))  # fmt: skip
SAMPLE_EVERY_S = 0.2
# The error of a run whose scheduler process ended on its own before the run did.
PEER_EXIT = "scheduler process exited early"
# No single process held the work when the failover's kill was due: for ours a failure, for a
# peer a finding (RedBeat's beats both ticking once its lock lapsed mid-tick, bench/compare/
# method.py).
NO_HOLDER = "failover: no process held the work at the kill instant"
# After the last expected message, how long we keep watching for late duplicates.
SETTLE_S = 3.0


@dataclass
class Sample:
    at: float
    rss_bytes: int
    cpu_s: float
    queued: int


@dataclass
class RunResult:
    scheduler: str
    case: Case
    repetition: int
    due_at: float
    spawned_at: float
    ready_at: float | None = None
    lateness_s: list[float] = field(default_factory=list)
    duplicates: int = 0
    # Ours: extra messages of a run already sent (at-least-once publish), not firings.
    resent: int = 0
    misses: int = 0
    unexpected: int = 0
    untimed: int = 0
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None
    # The scheduler had not started (first tick / first lease) within the case's start-up cap
    # and was stopped: everything due counts as unfinished.
    unstarted: bool = False
    # Steady: (publish time, lateness) of every firing, in publish order.
    timeline: list[tuple[float, float]] = field(default_factory=list)
    # False where misses and duplicates have no definition (peers' re-anchoring intervals).
    counted: bool = True
    # Failover: what was killed and when, and the figures of the takeover (FailoverStats).
    victim: Victim | None = None
    kill_at: float | None = None
    failover: FailoverStats | None = None
    # End to end: CPU seconds of the scheduler processes, the workers (pool children
    # included) and the embedded PostgreSQL and Redis servers, from spawn to the end.
    cpu_split: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return (
            self.error is None and self.duplicates == 0 and self.misses == 0
            and self.unexpected == 0
        )  # fmt: skip


class Sampler(threading.Thread):
    """Polls RSS and CPU time of the scheduler processes, and the broker queue length."""

    def __init__(self, procs: list[subprocess.Popen[bytes]], env: dict[str, str], ours: bool):
        super().__init__(daemon=True)
        self._procs = [psutil.Process(p.pid) for p in procs]
        self._client = redis.Redis.from_url(env["REDIS_URL"])
        self._env = env
        self._ours = ours
        self.samples: list[Sample] = []
        self.ready_at: float | None = None
        self.stop = threading.Event()

    def queued(self) -> int:
        pipe = self._client.pipeline(transaction=False)
        for key in QUEUE_KEYS:
            pipe.llen(key)
        return int(sum(pipe.execute()))

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY_S):
            rss, cpu = 0, 0.0
            for proc in self._procs:
                try:
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    cpu += times.user + times.system
                except psutil.NoSuchProcess:
                    continue
            self.samples.append(Sample(time.time(), rss, cpu, self.queued()))
            if self._ours and self.ready_at is None and first_lease_seen(self._env):
                self.ready_at = time.time()


def decode(raw: bytes) -> list[object]:
    """Task args from a kombu Redis-transport envelope holding a Celery protocol-2 message."""
    envelope = json.loads(raw)
    body = json.loads(base64.b64decode(envelope["body"]))
    return list(body[0])


def stop_processes(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait(
    result: RunResult,
    sampler: Sampler,
    procs: list[subprocess.Popen[bytes]],
    started: Callable[[], bool],
    kill: Callable[[], tuple[Victim, float] | None] | None = None,
) -> None:
    case = result.case
    cap_at = result.spawned_at + case.startup_cap_s if case.startup_cap_s else None
    settle_until: float | None = None
    # Steady and failover runs last their duration; a spike ends when every due message is in.
    timed = case.scenario in ("steady", "failover")
    until = case.duration_s if timed else case.deadline_s
    while True:
        now = time.time()
        if kill is not None and result.kill_at is None and now >= result.due_at + case.kill_after_s:
            killed = kill()
            if killed is None:
                result.error = NO_HOLDER
                return
            result.victim, result.kill_at = killed
        alive = [
            (i, p) for i, p in enumerate(procs) if not (result.victim and i == result.victim.index)
        ]
        exited = [(i, p.poll()) for i, p in alive if p.poll() is not None]
        if exited:
            # Which process ended and how (its log is <scheduler>-<index>.log in the run's
            # folder): the first of several processes may well still be running.
            index, code = exited[0]
            result.error = f"{PEER_EXIT} (process {index}, code {code})"
            return
        if now > result.due_at + until:
            return
        if cap_at is not None and now > cap_at:
            if not started():
                result.unstarted = True
                return
            cap_at = None
        if not timed and now >= result.due_at and sampler.queued() >= case.due:
            settle_until = settle_until or now + SETTLE_S
            if now >= settle_until:
                return
        time.sleep(0.25)


def fresh_run(out_dir: Path, env: dict[str, str]) -> redis.Redis:
    """An empty output directory and an empty Redis database for one measured run; the client
    is the caller's to close."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.iterdir():
        stale.unlink()
    client = redis.Redis.from_url(env["REDIS_URL"])
    client.flushdb()
    return client


def measure(
    contender: Contender, case: Case, repetition: int, out_dir: Path, env: dict[str, str]
) -> RunResult:
    client = fresh_run(out_dir, env)
    # Interval schedules fire at any second: aim just past registration and start-up.
    due = datetime.fromtimestamp(due_instant(time.time(), contender.name, case), UTC)
    contender.register(case, due, env)
    spawned = time.time()
    result = RunResult(contender.name, case, repetition, due.timestamp(), spawned)
    if spawned > due.timestamp():
        # Not the scheduler's fault, and its lateness would be measured from a past instant.
        result.error = f"registration overran the due instant by {spawned - due.timestamp():.1f}s"
        return result
    procs = contender.start(case, due, out_dir, env)
    sampler = Sampler(procs, env, ours=contender.name.startswith("ours"))
    sampler.start()
    kill = None
    if case.scenario == "failover":
        from bench.compare.failover import kill_victim

        def kill() -> tuple[Victim, float] | None:
            return kill_victim(contender, procs, out_dir, env)

    def started() -> bool:
        return sampler.ready_at is not None or contender.ready_at(out_dir, env) is not None

    try:
        _wait(result, sampler, procs, started, kill)
    finally:
        sampler.stop.set()
        sampler.join()
        stop_processes(procs)
    result.samples = sampler.samples
    result.ready_at = contender.ready_at(out_dir, env) or sampler.ready_at
    messages = [decode(raw) for key in QUEUE_KEYS for raw in client.lrange(key, 0, -1)]
    client.close()
    firings, result.resent = collapse_resent(contender.firings(messages, out_dir, env))
    if case.scenario == "steady":
        from bench.compare.steady_count import count_steady

        count_steady(result, firings)
    elif case.scenario == "failover":
        from bench.compare.steady_count import count_failover

        count_failover(result, firings)
    else:
        _count(result, firings)
    return result


def collapse_resent(firings: list[Firing]) -> tuple[list[Firing], int]:
    """Our messages of one run after the first, dropped, and how many there were.

    Our engine publishes at least once: a run whose push was not yet marked when its node
    died is sent again by the next owner's sweep. Both messages carry the same run id, and the
    worker's compare-and-set runs it once (tests/integration/test_execution_runs.py), so they
    are one firing, reported as *re-sent*; two runs for one instant would still count as a
    duplicate. Peers' messages carry no run id: each one is a firing.
    """
    kept: list[Firing] = []
    seen: set[str] = set()
    for firing in firings:
        if firing.run_id is not None:
            if firing.run_id in seen:
                continue
            seen.add(firing.run_id)
        kept.append(firing)
    return kept, len(firings) - len(kept)


def _count(result: RunResult, firings: list[Firing]) -> None:
    due_names = {f"job-{i:07d}" for i in range(result.case.due)}
    seen = Counter(f.name for f in firings)
    result.duplicates = sum(n - 1 for name, n in seen.items() if n > 1)
    result.misses = len(due_names - set(seen))
    result.unexpected = sum(n for name, n in seen.items() if name not in due_names)
    first_of: dict[str, float] = {}
    for firing in firings:
        if firing.name not in due_names:
            continue
        if firing.published_at is None:
            result.untimed += 1
        elif firing.name not in first_of or firing.published_at < first_of[firing.name]:
            first_of[firing.name] = firing.published_at
    result.lateness_s = sorted(at - result.due_at for at in first_of.values())
