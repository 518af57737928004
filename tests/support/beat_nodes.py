"""Beat engine test helpers: in-process engines on a FakeClock, and subprocess nodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import redis
from django.conf import settings

from beat_engine.clock import Clock
from beat_engine.config import EngineConfig
from beat_engine.engine import BeatEngine
from beat_engine.publisher import PRIORITY_SEP, PRIORITY_STEPS, Publisher
from beat_engine.redis_leases import RedisLeaseStore
from tests.support.waiting import test_database_url

ROOT = Path(__file__).resolve().parents[2]


# Engines made by make_engine during the current test; the autouse fixture in tests/conftest.py
# stops their helper threads when the test ends, before the database is flushed, so that no
# thread of one test still reads or writes during the next one's flush.
ENGINES_MADE: list[BeatEngine] = []


def make_engine(clock: Clock, node_id: str = "node-a", **overrides: Any) -> BeatEngine:
    """An engine without a change feed: tests drive it with tick() and a FakeClock.

    The broker queue's bound is the fixed one unless a test asks for the adaptive one
    (``broker_queue_target_wait_s``): no worker drains these queues, and a drain rate measured
    on a clock the test moves by whole seconds would size the bound from nothing.

    Firings are claimed at their instant unless a test asks for a claim ahead
    (``claim_ahead_s``, tests/integration/test_engine_claim_ahead.py): most tests step the
    clock up to an instant and look at what the claim did there."""
    overrides.setdefault("broker_queue_target_wait_s", 0.0)
    overrides.setdefault("claim_ahead_s", 0.0)
    config = EngineConfig.from_settings(node_id=node_id, **overrides)
    client = redis.Redis.from_url(config.redis_url)
    engine = BeatEngine(
        config=config,
        clock=clock,
        store=RedisLeaseStore(client),
        publisher=Publisher(redis.Redis.from_url(config.broker_url), origin=node_id),
    )
    ENGINES_MADE.append(engine)
    return engine


def close_engines_made() -> None:
    while ENGINES_MADE:
        ENGINES_MADE.pop().close_background()


def broker_messages(client: redis.Redis, queue: str = "scheduler") -> list[dict[str, Any]]:
    """Every message waiting in ``queue`` (all priority lists), oldest first."""
    found: list[dict[str, Any]] = []
    for key in [queue, *(f"{queue}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS if step)]:
        found.extend(json.loads(raw) for raw in reversed(client.lrange(key, 0, -1)))
    return found


def message_args(message: dict[str, Any]) -> list[Any]:
    import base64

    body = json.loads(base64.b64decode(message["body"]))
    args: list[Any] = body[0]
    return args


def pause_s(seconds: float) -> None:
    """Let real subprocesses run for a while (fault scenarios follow a timeline)."""
    time.sleep(max(0.0, seconds))


class Fault(Enum):
    KILL = signal.SIGKILL
    TERM = signal.SIGTERM
    PAUSE = signal.SIGSTOP
    RESUME = signal.SIGCONT


@dataclass
class BeatNode:
    """A `manage.py beat_engine` subprocess with fault operations."""

    node_id: str
    log_dir: Path
    env_overrides: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    # Started with `--slot N` instead of `--node-id`: the node names itself <hostname>-<N>
    # (node_id then only names the log file).
    slot: int | None = None

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.node_id}.log"

    def start(self) -> None:
        env = dict(os.environ)
        env["DATABASE_URL"] = test_database_url()
        env["REDIS_URL"] = settings.REDIS_URL
        env.pop("CELERY_BROKER_URL", None)
        # The fixed queue bound unless a test asks for the adaptive one: fault scenarios stop
        # the workers, or have none, and count every message the nodes push.
        env.setdefault("SCHEDULER_BROKER_QUEUE_TARGET_WAIT_S", "0")
        env.update(self.env_overrides)
        self.starts += 1
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "beat_engine", *self._identity_args()],
            cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True,
        )  # fmt: skip
        log.close()

    def _identity_args(self) -> list[str]:
        if self.slot is not None:
            return ["--slot", str(self.slot)]
        return ["--node-id", self.node_id]

    def signal(self, fault: Fault) -> None:
        assert self.process is not None
        self.process.send_signal(fault.value)

    def kill(self) -> None:
        self.signal(Fault.KILL)
        self.wait()

    def pause(self) -> None:
        self.signal(Fault.PAUSE)

    def resume(self) -> None:
        self.signal(Fault.RESUME)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.signal(Fault.RESUME)
            self.signal(Fault.TERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.wait()

    def wait(self) -> None:
        if self.process is not None:
            self.process.wait(timeout=20)

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        found = []
        if not self.log_path.exists():
            return []
        for line in self.log_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if name is None or event.get("event") == name:
                    found.append(event)
        return found
