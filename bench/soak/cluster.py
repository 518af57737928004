"""The soak's real processes: embedded PostgreSQL and Redis, beat nodes, workers, the target.

Every process gets its own session, so a kill reaches a worker's pool children too and the
cleanup on exit (or on SIGTERM/SIGINT of the harness) leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from scheduler_project.embedded import EmbeddedServices

ROOT = Path(__file__).resolve().parents[2]
STOP_TIMEOUT_S = 20.0
# Short run leases and heartbeats, so an attempt on a killed worker is re-queued within the
# soak; both stay well above a heartbeat's cost.
CHILD_SETTINGS = {
    "SCHEDULER_RUN_LEASE_S": "10",
    "SCHEDULER_HEARTBEAT_S": "2",
    "SCHEDULER_CANCEL_GRACE_S": "1",
    "CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT": "0",
    "DJANGO_SETTINGS_MODULE": "scheduler_project.settings",
}


def _stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        proc.wait()


def _tree(proc: subprocess.Popen[bytes]) -> frozenset[int]:
    pids = {proc.pid}
    with contextlib.suppress(psutil.NoSuchProcess):
        pids |= {child.pid for child in psutil.Process(proc.pid).children(recursive=True)}
    return frozenset(pids)


def _kill(proc: subprocess.Popen[bytes]) -> frozenset[int]:
    """SIGKILL a process and everything in its session; the pids that were killed."""
    pids = _tree(proc)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return pids


@dataclass
class Managed:
    """A beat node or a worker, and whether the soak wants it up right now."""

    name: str
    argv: list[str]
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    wanted_up: bool = False
    starts: int = 0

    def start(self, env: dict[str, str]) -> None:
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                self.argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        self.starts += 1
        self.wanted_up = True

    def exited(self) -> int | None:
        """The exit code if the process ended while the soak wanted it up."""
        if self.wanted_up and self.proc is not None and self.proc.poll() is not None:
            return self.proc.returncode
        return None


@dataclass
class Cluster:
    root: Path
    beat_nodes: int
    workers: int
    concurrency: int
    services: EmbeddedServices = field(init=False)
    env: dict[str, str] = field(init=False, default_factory=dict)
    target: subprocess.Popen[bytes] | None = None
    target_port: int = 0
    beats: list[Managed] = field(default_factory=list)
    pools: list[Managed] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.services = EmbeddedServices(self.root / "services")
        self.logs = self.root / "logs"
        self.ledger_path = self.root / "ledger.jsonl"

    def start_services(self) -> dict[str, str]:
        self.logs.mkdir(parents=True, exist_ok=True)
        started = self.services.start()
        self.env = {**os.environ, **started, **CHILD_SETTINGS, "PYTHONPATH": str(ROOT)}
        return started

    def start_target(self) -> int:
        self.ledger_path.unlink(missing_ok=True)
        with (self.logs / "target.log").open("ab") as log:
            self.target = subprocess.Popen(
                [sys.executable, "-m", "bench.soak.target", str(self.ledger_path)],
                cwd=ROOT, env=self.env, stdout=subprocess.PIPE, stderr=log,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        assert self.target.stdout is not None
        line = self.target.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError("the soak's HTTP target did not start (see logs/target.log)")
        self.target_port = int(line)
        self.env["SCHEDULER_HTTP_ALLOWLIST"] = f"127.0.0.1:{self.target_port}"
        return self.target_port

    def start_processes(self) -> None:
        python = sys.executable
        for i in range(self.beat_nodes):
            node = f"soak-beat-{i}"
            argv = [python, "manage.py", "beat_engine", "--node-id", node]
            self.beats.append(Managed(node, argv, self.logs / f"{node}.log"))
        for i in range(self.workers):
            self.pools.append(Managed(f"soak-worker-{i}", [], self.logs / f"soak-worker-{i}.log"))
        for managed in self.beats:
            managed.start(self.env)
        for i in range(self.workers):
            self.start_worker(i)

    def _worker_argv(self, index: int) -> list[str]:
        generation = self.pools[index].starts + 1
        return [
            sys.executable, "-m", "celery", "-A", "scheduler_project", "worker",
            "--loglevel", "WARNING", "--pool", "prefork", "--concurrency", str(self.concurrency),
            "-Q", "scheduler", "-n", f"soak-w{index}-g{generation}@%h",
            "--without-mingle", "--without-gossip",
        ]  # fmt: skip

    def start_worker(self, index: int) -> None:
        pool = self.pools[index]
        pool.argv = self._worker_argv(index)
        pool.start(self.env)

    def start_beat(self, index: int) -> None:
        self.beats[index].start(self.env)

    def pids(self, managed: Managed) -> frozenset[int]:
        if managed.proc is None or managed.proc.poll() is not None:
            return frozenset()
        return _tree(managed.proc)

    def kill(self, managed: Managed) -> frozenset[int]:
        managed.wanted_up = False
        if managed.proc is None or managed.proc.poll() is not None:
            return frozenset()
        return _kill(managed.proc)

    def redis_down(self) -> None:
        self.services.redis.stop()

    def redis_up(self) -> None:
        # Same data folder and socket: every process reconnects to the address it knows.
        self.services.redis.start()

    def stop_scheduling(self) -> None:
        for managed in self.beats:
            managed.wanted_up = False
            _stop(managed.proc)

    def stop_processes(self) -> None:
        """Beat nodes and workers, then the target (which closes its ledger); not the servers."""
        for managed in [*self.beats, *self.pools]:
            managed.wanted_up = False
            _stop(managed.proc)
        if self.target is not None:
            _stop(self.target)
            if self.target.stdout is not None:
                self.target.stdout.close()
            self.target = None

    def stop_all(self) -> None:
        """Stop everything this cluster started; safe to call more than once."""
        try:
            self.stop_processes()
        finally:
            self.services.stop()


def pool_ready(managed: Managed, concurrency: int) -> bool:
    """Whether a worker has forked its pool (it logs at WARNING only, so no "ready" line)."""
    if managed.proc is None or managed.proc.poll() is not None:
        return False
    try:
        return len(psutil.Process(managed.proc.pid).children()) >= concurrency
    except psutil.NoSuchProcess:
        return False
