"""PostgreSQL and Redis for the benchmark: embedded under .local/bench-compare unless given."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

ROOT = Path(__file__).resolve().parents[2]
SERVICES_DIR = ROOT / ".local" / "bench-compare"
DCB_DATABASE = "bench_dcb"


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


@contextmanager
def services() -> Iterator[dict[str, str]]:
    """Yield DATABASE_URL, REDIS_URL and BENCH_DCB_DATABASE_URL, starting servers if needed."""
    given = {k: os.environ[k] for k in ("DATABASE_URL", "REDIS_URL") if os.environ.get(k)}
    embedded = None
    if len(given) < 2:
        from scheduler_project.embedded import EmbeddedServices

        embedded = EmbeddedServices(SERVICES_DIR)
        print(f"==> starting embedded PostgreSQL and Redis in {SERVICES_DIR}", flush=True)
        started = embedded.start()
        given = {**started, **given}
    env = dict(os.environ)
    env.update(given)
    env["BENCH_DCB_DATABASE_URL"] = with_database(given["DATABASE_URL"], DCB_DATABASE)
    try:
        yield env
    finally:
        if embedded is not None:
            print("==> stopping embedded PostgreSQL and Redis", flush=True)
            embedded.stop()


def prepare_databases(env: dict[str, str]) -> None:
    """Migrate the project's database and a separate one for django-celery-beat's tables."""
    with psycopg.connect(with_database(env["DATABASE_URL"], "postgres"), autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DCB_DATABASE])
        if exists.fetchone() is None:
            conn.execute(f'CREATE DATABASE "{DCB_DATABASE}"')
    quiet = {"stdout": subprocess.DEVNULL}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT, env=env, check=True, **quiet,
    )  # fmt: skip
    dcb_env = {**env, "DJANGO_SETTINGS_MODULE": "bench.compare.dcb_settings"}
    subprocess.run(
        [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"],
        cwd=ROOT, env=dcb_env, check=True, **quiet,
    )  # fmt: skip
