"""A PostgreSQL primary and a streaming standby from the embedded (pgserver) binaries, on Unix
sockets only, for failover tests and benchmarks.

As scheduler_project/embedded.py does through pgserver, the servers run as the unprivileged
``pgserver`` user when this process is root (PostgreSQL refuses to run as root). Replication is
synchronous (``synchronous_standby_names = '*'`` on the primary), so a commit is acknowledged
only once the standby has it: what a client saw committed survives the primary's death.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg

BIN = Path(__import__("pgserver").__file__).parent / "pginstall" / "bin"
DATABASE = "scheduler"
_START_TIMEOUT_S = 30.0


def _system_user() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("pgserver")
    except KeyError:
        subprocess.run(["useradd", "-s", "/bin/bash", "pgserver"], check=True, capture_output=True)
    return "pgserver"


def _own(path: Path, user: str | None) -> None:
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(path, entry.pw_uid, entry.pw_gid)


@dataclass
class PgNode:
    name: str
    root: Path
    user: str | None
    data_dir: Path = field(init=False)
    socket_dir: Path = field(init=False)

    def __post_init__(self) -> None:
        self.data_dir = self.root / self.name / "data"
        self.socket_dir = self.root / self.name / "sock"

    @property
    def log_path(self) -> Path:
        return self.root / self.name / "postgres.log"

    def run(self, tool: str, *args: str, timeout: float = 60.0) -> str:
        result = subprocess.run(
            [str(BIN / tool), *args],
            user=self.user,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=self.root,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"{tool} {' '.join(args)} failed: {result.stderr}{result.stdout}")
        return result.stdout

    def prepare_dirs(self) -> None:
        for path in (self.root / self.name, self.socket_dir):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o755)
            _own(path, self.user)

    def start(self) -> None:
        self.run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_path), "-w",
            "-t", str(int(_START_TIMEOUT_S)), "-o", f"-k {self.socket_dir} -h ''", "start",
        )  # fmt: skip

    def conninfo(self, dbname: str = DATABASE) -> str:
        return f"host={self.socket_dir} user=postgres dbname={dbname}"

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "postmaster.pid").read_text().split()[0])

    def kill(self) -> None:
        """The machine's death: SIGKILL the postmaster and every backend at once, no shutdown
        checkpoint, no goodbye to clients."""
        pid = self.postmaster_pid()
        try:
            children = psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            children = []
        os.kill(pid, signal.SIGKILL)
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        psutil.wait_procs([psutil.Process(pid)] if psutil.pid_exists(pid) else [], timeout=10)

    def stop(self) -> None:
        if not (self.data_dir / "postmaster.pid").exists():
            return
        with contextlib.suppress(RuntimeError):
            self.run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop")


@dataclass
class ReplicatedPostgres:
    """A primary and its synchronous streaming standby; ``url`` lists both hosts."""

    primary: PgNode
    standby: PgNode
    root: Path

    @classmethod
    def create(cls) -> ReplicatedPostgres:
        # A short root: a socket path must fit in 107 bytes.
        root = Path(tempfile.mkdtemp(prefix="pgha-", dir="/tmp"))
        root.chmod(0o755)
        user = _system_user()
        _own(root, user)
        return cls(PgNode("a", root, user), PgNode("b", root, user), root)

    @property
    def url(self) -> str:
        hosts = f"{self.primary.socket_dir},{self.standby.socket_dir}"
        return f"postgresql://postgres@/{DATABASE}?host={hosts}&target_session_attrs=read-write"

    def start(self) -> None:
        primary, standby = self.primary, self.standby
        primary.prepare_dirs()
        standby.prepare_dirs()
        primary.run(
            "initdb", "-D", str(primary.data_dir), "--auth=trust", "--auth-local=trust",
            "--encoding=utf8", "-U", "postgres",
        )  # fmt: skip
        with (primary.data_dir / "postgresql.conf").open("a") as conf:
            # fsync off: a SIGKILL keeps what reached the OS, and the test saves seconds;
            # durability against the primary's death comes from the synchronous standby.
            conf.write(
                "\nwal_level = replica\nmax_wal_senders = 4\nfsync = off\n"
                "shared_buffers = 32MB\nmax_connections = 60\nwal_sender_timeout = 5s\n"
            )
        primary.start()
        with psycopg.connect(primary.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{DATABASE}"')
        standby.run(
            "pg_basebackup", "-D", str(standby.data_dir), "-R", "-X", "stream", "-c", "fast",
            "-d", primary.conninfo("postgres"),
        )  # fmt: skip
        standby.data_dir.chmod(0o700)
        standby.start()
        with psycopg.connect(primary.conninfo("postgres"), autocommit=True) as conn:
            # Set on the primary only, after the copy: a promoted standby with it set would
            # wait forever for a standby of its own.
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            conn.execute("SELECT pg_reload_conf()")
            deadline = time.monotonic() + _START_TIMEOUT_S
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
                ).fetchone()
                if row and row[0] == 1:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("the standby never became synchronous")
                time.sleep(0.1)

    def promote_standby(self) -> None:
        """The operator's one action (or Patroni's, pg_auto_failover's)."""
        self.standby.run("pg_ctl", "-D", str(self.standby.data_dir), "-w", "promote")

    def stop(self) -> None:
        for node in (self.standby, self.primary):
            node.stop()
        shutil.rmtree(self.root, ignore_errors=True)
