"""One end-to-end run: every due firing executed by Celery workers against a local HTTP target.

The target (bench.compare.http_target) answers after E2E_TARGET_DELAY_S and records each
request's firing in its ledger. Ours registers HTTP-target jobs run by our workers
(``celery -A scheduler_project worker``, the executor ``jobs.execute_run``); RedBeat registers
entries whose plain Celery task makes the same POST (bench.compare.peer_app.http_fire), run by
workers of the peers' app. Both get E2E_WORKERS prefork workers of E2E_CONCURRENCY processes,
started and forked before the scheduler is spawned, so the time measured is the scheduler's
and the execution's, not worker start-up. The run ends when the target has seen every due
firing (plus SETTLE_S for late duplicates) or at the case's deadline; figures come from the
ledger (bench.compare.e2e_count).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import psutil

from bench.compare.contender import Contender, spawn
from bench.compare.e2e_count import count_at_target, parse_ledger
from bench.compare.runner import (
    PEER_EXIT,
    SETTLE_S,
    RunResult,
    Sample,
    fresh_run,
    stop_processes,
)
from bench.compare.services import SERVICES_DIR
from bench.compare.timing import due_instant
from bench.compare.workload import E2E_CONCURRENCY, E2E_TARGET_DELAY_S, E2E_WORKERS, Case

SAMPLE_EVERY_S = 0.5
POLL_S = 0.25
TARGET_PATH = "/fire"


def due_names(case: Case) -> set[str]:
    return {f"job-{i:07d}" for i in range(case.due)}


def start_target(out_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    """The HTTP target in its own process; (process, port)."""
    log = (out_dir / "target.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.compare.http_target", str(out_dir / "ledger.tsv"),
         str(E2E_TARGET_DELAY_S)],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.strip().isdigit():
        stop_processes([proc])
        raise RuntimeError(f"the HTTP target did not start (see {out_dir / 'target.log'})")
    return proc, int(line)


def target_counts(port: int) -> dict[str, int]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/count", timeout=5) as answer:
        return dict(json.loads(answer.read()))


def worker_argv(contender: Contender, index: int) -> list[str]:
    ours = contender.name.startswith("ours")
    app, queue = (
        ("scheduler_project", "scheduler") if ours else ("bench.compare.peer_app", "celery")
    )
    return [
        sys.executable, "-m", "celery", "-A", app, "worker", "--loglevel", "WARNING",
        "--pool", "prefork", "--concurrency", str(E2E_CONCURRENCY), "-Q", queue,
        "-n", f"e2e-{index}@%h", "--without-mingle", "--without-gossip",
    ]  # fmt: skip


def worker_env(contender: Contender, env: dict[str, str]) -> dict[str, str]:
    if contender.name.startswith("ours"):
        return env
    from scheduler_project.env import celery_broker_from_redis_url

    return {
        **env,
        "BENCH_PEER": contender.name,
        "BENCH_BROKER_URL": celery_broker_from_redis_url(env["REDIS_URL"]),
        "BENCH_REDIS_URL": env["REDIS_URL"],
        "DJANGO_SETTINGS_MODULE": "bench.compare.dcb_settings",
    }


def pools_forked(workers: list[subprocess.Popen[bytes]]) -> bool:
    """Whether every worker has forked its pool (they log at WARNING only: no "ready" line)."""
    try:
        return all(
            len(psutil.Process(w.pid).children()) >= E2E_CONCURRENCY for w in workers
        )  # fmt: skip
    except psutil.NoSuchProcess:
        return False


def service_roots() -> list[psutil.Process]:
    """The embedded PostgreSQL and Redis servers (their command line names their folder
    under SERVICES_DIR); none when the benchmark was given external ones."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if any(str(SERVICES_DIR) in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
    return found


class TreeSampler(threading.Thread):
    """CPU and RSS of whole process trees (a worker's pool children included), by group.

    CPU is each process's own user+system time, kept per pid at its largest value, so a
    child that exits keeps what it used until its last sample. Processes already running when
    the sampler is made (the workers, forked before the scheduler's spawn, and the database
    servers) count from then on: their start-up and earlier runs are not this run's. The
    scheduler's processes are passed as ``fresh`` and count from their spawn.
    """

    def __init__(self, groups: dict[str, list[psutil.Process]], fresh: tuple[str, ...]) -> None:
        super().__init__(daemon=True)
        self._groups = groups
        self._cpu: dict[str, dict[int, float]] = {name: {} for name in groups}
        self._base: dict[int, float] = {}
        for name, roots in groups.items():
            if name not in fresh:
                self._base.update(self._read(roots))
        self.samples: list[Sample] = []
        self.stop = threading.Event()

    @staticmethod
    def _read(roots: list[psutil.Process]) -> dict[int, float]:
        """Each process's user+system seconds, over the trees of ``roots``."""
        used: dict[int, float] = {}
        for root in roots:
            with contextlib.suppress(psutil.Error):
                for proc in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        times = proc.cpu_times()
                        used[proc.pid] = times.user + times.system
        return used

    def cpu_s(self, group: str) -> float:
        return sum(self._cpu[group].values())

    def sample(self) -> None:
        rss = 0
        for name, roots in self._groups.items():
            cpu = self._cpu[name]
            for pid, used in self._read(roots).items():
                cpu[pid] = max(cpu.get(pid, 0.0), used - self._base.get(pid, 0.0))
            if name != "services":
                for root in roots:
                    with contextlib.suppress(psutil.Error):
                        for proc in [root, *root.children(recursive=True)]:
                            with contextlib.suppress(psutil.Error):
                                rss += proc.memory_info().rss
        busy = self.cpu_s("scheduler") + self.cpu_s("workers")
        self.samples.append(Sample(time.time(), rss, busy, 0))

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_EVERY_S):
            self.sample()
        self.sample()


def measure_e2e(
    contender: Contender, case: Case, repetition: int, out_dir: Path, env: dict[str, str]
) -> RunResult:
    fresh_run(out_dir, env).close()
    target, port = start_target(out_dir, env)
    workers: list[subprocess.Popen[bytes]] = []
    procs: list[subprocess.Popen[bytes]] = []
    try:
        run_env = {
            **env,
            "BENCH_TARGET_URL": f"http://127.0.0.1:{port}{TARGET_PATH}",
            "SCHEDULER_HTTP_ALLOWLIST": f"127.0.0.1:{port}",
            # Stopped at the end of the run with nothing left to finish.
            "CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT": "0",
        }
        due = datetime.fromtimestamp(due_instant(time.time(), contender.name, case), UTC)
        contender.register(case, due, run_env)
        w_env = worker_env(contender, run_env)
        workers = [
            spawn(worker_argv(contender, i), out_dir, w_env, f"worker-{i}")
            for i in range(E2E_WORKERS)
        ]
        while not pools_forked(workers) and time.time() < due.timestamp():
            if any(w.poll() is not None for w in workers):
                break
            time.sleep(POLL_S)
        spawned = time.time()
        result = RunResult(contender.name, case, repetition, due.timestamp(), spawned)
        if any(w.poll() is not None for w in workers):
            result.error = "a worker exited during start-up (see its log)"
            return result
        if spawned > due.timestamp():
            result.error = (
                f"registration and worker start-up overran the due instant by "
                f"{spawned - due.timestamp():.1f}s"
            )
            return result
        procs = contender.start(case, due, out_dir, run_env)
        sampler = TreeSampler({
            "scheduler": [psutil.Process(p.pid) for p in procs],
            "workers": [psutil.Process(w.pid) for w in workers],
            "services": service_roots(),
        }, fresh=("scheduler",))  # fmt: skip
        sampler.start()
        try:
            _wait(result, port, procs, workers)
        finally:
            sampler.stop.set()
            sampler.join()
        result.samples = sampler.samples
        result.cpu_split = {g: sampler.cpu_s(g) for g in ("scheduler", "workers", "services")}
        result.ready_at = contender.ready_at(out_dir, env)
    finally:
        stop_processes(procs)
        stop_processes(workers)
        stop_processes([target])
        if target.stdout is not None:
            target.stdout.close()
    _count(result, out_dir / "ledger.tsv")
    return result


def _wait(
    result: RunResult,
    port: int,
    procs: list[subprocess.Popen[bytes]],
    workers: list[subprocess.Popen[bytes]],
) -> None:
    case = result.case
    settle_until: float | None = None
    while True:
        now = time.time()
        for kind, group in (("scheduler", procs), ("worker", workers)):
            exited = [(i, p.poll()) for i, p in enumerate(group) if p.poll() is not None]
            if exited:
                index, code = exited[0]
                result.error = f"{PEER_EXIT} ({kind} {index}, code {code})"
                return
        if now > result.due_at + case.deadline_s:
            return
        if now >= result.due_at and target_counts(port)["firings"] >= case.due:
            settle_until = settle_until or now + SETTLE_S
            if now >= settle_until:
                return
        time.sleep(POLL_S)


def _count(result: RunResult, ledger: Path) -> None:
    lines = ledger.read_text().splitlines() if ledger.exists() else []
    deliveries, bad = parse_ledger(lines)
    counted = count_at_target(deliveries, due_names(result.case), result.due_at, bad)
    result.duplicates = counted.duplicates
    result.misses = counted.misses
    result.unexpected = counted.unexpected
    result.lateness_s = counted.lateness_s
