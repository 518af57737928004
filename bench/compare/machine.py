"""What the figures were measured on: machine, and versions of everything compared."""

from __future__ import annotations

import os
import platform
from importlib import metadata

import psycopg
import redis

PACKAGES = ("celery", "kombu", "redis", "Django", "django-celery-beat", "celery-redbeat",
            "psycopg")  # fmt: skip


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory_gib() -> float:
    with open("/proc/meminfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    return 0.0


def describe_machine(env: dict[str, str]) -> dict[str, str]:
    with psycopg.connect(env["DATABASE_URL"]) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        pg_version = str(row[0]) if row else "unknown"
    client = redis.Redis.from_url(env["REDIS_URL"])
    redis_version = str(client.info("server").get("redis_version", "unknown"))
    client.close()
    facts = {
        "CPUs (nproc)": str(os.cpu_count()),
        "CPU model": cpu_model(),
        "memory": f"{memory_gib():.1f} GiB",
        "kernel": platform.release(),
        "Python": platform.python_version(),
        "PostgreSQL": f"{pg_version} (embedded, Unix socket)",
        "Redis": f"{redis_version} (embedded, Unix socket)",
    }
    for package in PACKAGES:
        facts[package] = metadata.version(package)
    return facts
