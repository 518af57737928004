"""The embedded PostgreSQL and Redis start on Unix sockets only, and stop leaving nothing."""

from __future__ import annotations

from pathlib import Path

import psutil
import psycopg
import pytest
import redis

from scheduler_project.embedded import EmbeddedServices


def _listening_tcp_ports(pid: int) -> list[int]:
    process = psutil.Process(pid)
    procs = [process, *process.children(recursive=True)]
    return [
        conn.laddr.port
        for proc in procs
        for conn in proc.net_connections(kind="inet")
        if conn.status == psutil.CONN_LISTEN
    ]


@pytest.mark.timeout(120)
def test_embedded_services_start_serve_and_stop(tmp_path: Path) -> None:
    services = EmbeddedServices(tmp_path / "svc")
    env = services.start()
    try:
        assert "host=" in env["DATABASE_URL"]
        assert env["REDIS_URL"].startswith("unix://")
        with psycopg.connect(env["DATABASE_URL"]) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            listen = conn.execute("SHOW listen_addresses").fetchone()
        assert listen == ("",)
        client = redis.Redis.from_url(env["REDIS_URL"])
        assert client.ping()
        assert client.config_get("port") == {"port": "0"}
        client.close()
        redis_pid = services.redis.process.pid if services.redis.process else 0
        assert _listening_tcp_ports(redis_pid) == []
        pg_pid = services.postgres._server.get_pid()
    finally:
        services.stop()
    assert not psutil.pid_exists(redis_pid) or psutil.Process(redis_pid).status() == "zombie"
    assert (
        pg_pid is None
        or not psutil.pid_exists(pg_pid)
        or (psutil.Process(pg_pid).status() == "zombie")
    )
    assert not (tmp_path / "svc" / "redis" / "redis.sock").exists()
