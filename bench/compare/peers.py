"""The peers: stock celery beat (PersistentScheduler), django-celery-beat, RedBeat."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict, deque
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bench.compare.contender import Firing, Victim, run_register, spawn, steady_plan
from bench.compare.workload import FAILOVER_LEASE_S, REDBEAT_MAX_LOOP_S, Case

_PEER_TIMESTAMP = (
    "wall clock read in the beat process by an `after_task_publish` receiver, i.e. after "
    "kombu's publish (an LPUSH on the Redis transport) returned"
)
_SCHEDULER_CLASS = {
    "celery-beat": "celery.beat:PersistentScheduler",
    "django-celery-beat": "django_celery_beat.schedulers:DatabaseScheduler",
    "redbeat": "redbeat.RedBeatScheduler",
}


@dataclass
class Peer:
    name: str
    timestamp_meaning: str = _PEER_TIMESTAMP

    def register(self, case: Case, due_at: datetime, env: dict[str, str]) -> None:
        # celery beat's PersistentScheduler takes its entries from the app's beat_schedule,
        # built inside the beat process at start-up (see peer_app.interval_entries); a
        # pre-built shelve would save nothing, since merge_inplace rebuilds every entry.
        if self.name != "celery-beat":
            run_register(self.name, case, due_at, self._env(case, due_at, None, env))

    def _env(
        self, case: Case, due_at: datetime, out_dir: Path | None, env: dict[str, str]
    ) -> dict[str, str]:
        from scheduler_project.env import celery_broker_from_redis_url

        peer_env = {
            **env,
            "BENCH_PEER": self.name,
            "BENCH_BROKER_URL": celery_broker_from_redis_url(env["REDIS_URL"]),
            "BENCH_REDIS_URL": env["REDIS_URL"],
            "DJANGO_SETTINGS_MODULE": "bench.compare.dcb_settings",
        }
        if out_dir is not None:
            peer_env["BENCH_OUT_DIR"] = str(out_dir)
        if case.scenario == "failover":
            peer_env["BENCH_REDBEAT_LOCK_TIMEOUT"] = str(FAILOVER_LEASE_S)
            peer_env["BENCH_MAX_LOOP_S"] = str(REDBEAT_MAX_LOOP_S)
            # A killed process loses what its publish log buffered; write every line at once.
            peer_env["BENCH_FLUSH_S"] = "0"
        if self.name == "celery-beat" and case.scenario == "steady":
            peer_env["BENCH_STEADY"] = steady_plan(case, due_at)
        elif self.name == "celery-beat":
            spec = {"registered": case.registered, "due": case.due, "due_at": due_at.timestamp()}
            peer_env["BENCH_SPEC"] = json.dumps(spec)
        return peer_env

    def start(
        self, case: Case, due_at: datetime, out_dir: Path, env: dict[str, str]
    ) -> list[subprocess.Popen[bytes]]:
        argv = [
            sys.executable, "-m", "celery", "-A", "bench.compare.peer_app", "beat",
            f"--loglevel={os.environ.get('BENCH_BEAT_LOGLEVEL', 'WARNING')}",
            "-S", _SCHEDULER_CLASS[self.name],
            "-s", str(out_dir / "celerybeat-schedule"), "--pidfile=",
        ]  # fmt: skip
        peer_env = self._env(case, due_at, out_dir, env)
        if case.scenario != "failover":
            return [spawn(argv, out_dir, peer_env, self.name)]
        # Two beats: whichever takes RedBeat's lock first runs, the other blocks on the lock.
        return [
            spawn(argv, out_dir, {**peer_env, "BENCH_TAG": str(i)}, f"{self.name}-{i}")
            for i in range(2)
        ]

    def ready_at(self, out_dir: Path, env: dict[str, str]) -> float | None:
        marker = out_dir / "ready"
        return float(marker.read_text()) if marker.exists() else None

    def firings(
        self, messages: list[list[object]], out_dir: Path, env: dict[str, str]
    ) -> list[Firing]:
        # A message and its publish record are paired by entry name, in publish order.
        times: dict[str, deque[float]] = defaultdict(deque)
        # One log per beat process (failover runs two); merged in publish-time order.
        lines = [
            ln
            for log in sorted(out_dir.glob("publish*.log"))
            for ln in log.read_text().splitlines()
        ]
        for name, at in sorted((ln.split("\t") for ln in lines), key=lambda p: float(p[1])):
            times[name].append(float(at))
        result = []
        for args in messages:
            name = str(args[0])
            at = times[name].popleft() if times[name] else None
            result.append(Firing(name, at))
        return result

    def victim(self, out_dir: Path, env: dict[str, str]) -> Victim | None:
        """The beat that ticked, i.e. holds the lock (the standby blocks before its first tick)."""
        ticked = sorted(out_dir.glob("ticked-*"))
        if len(ticked) != 1:
            return None
        return Victim(int(ticked[0].name.split("-", 1)[1]), None, 1.0)


PEERS = {name: Peer(name) for name in _SCHEDULER_CLASS}
