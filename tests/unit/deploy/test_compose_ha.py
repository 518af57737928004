"""docker/compose.ha.yaml (not run here: no Docker engine) parses, and its URLs and settings are
ones our settings accept: the same parsers every process runs at start-up read them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from beat_engine.config import EngineConfig
from scheduler_project.env import database_from_url
from scheduler_project.redis_urls import check_redis_url, parse_sentinel_url

DOCKER = Path(__file__).resolve().parents[3] / "docker"
COMPOSE = DOCKER / "compose.ha.yaml"
APP_SERVICES = ("migrate", "web", "beat-1", "beat-2", "beat-3", "worker")
BEATS = ("beat-1", "beat-2", "beat-3")


def _interpolated(value: str) -> str:
    """Compose's ${VAR:?message} / ${VAR:-default} with a stand-in value, $$ as $."""
    value = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    value = re.sub(r"\$\{[A-Z_]+(:\?[^}]*)?\}", "s3cret", value)
    return value.replace("$$", "$")


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    found: dict[str, Any] = loaded["services"]
    return found


def _env(service: dict[str, Any]) -> dict[str, str]:
    return {k: _interpolated(str(v)) for k, v in service["environment"].items()}


def test_it_is_marked_as_not_run_here() -> None:
    assert "NOT RUN HERE" in COMPOSE.read_text().splitlines()[0]


def test_every_app_service_gets_urls_the_settings_accept(services: dict[str, Any]) -> None:
    for name in APP_SERVICES:
        env = _env(services[name])
        database = database_from_url(env["DATABASE_URL"])
        assert database["HOST"] == "pg-primary,pg-standby", name
        assert database["OPTIONS"]["target_session_attrs"] == "read-write", name
        master = env["SCHEDULER_REDIS_SENTINEL_MASTER"]
        check_redis_url(env["REDIS_URL"], name="REDIS_URL", master_name=master)
        # CELERY_BROKER_URL defaults to REDIS_URL: one Sentinel URL for broker, leases, feed.
        assert "CELERY_BROKER_URL" not in env
        target = parse_sentinel_url(env["REDIS_URL"], master_name=master)
        assert [host for host, _port in target.sentinels] == [
            "sentinel-1",
            "sentinel-2",
            "sentinel-3",
        ]


def test_the_urls_name_the_servers_the_file_runs(services: dict[str, Any]) -> None:
    env = _env(services["web"])
    hosts = urlsplit(env["DATABASE_URL"]).netloc.rsplit("@", 1)[1].split(",")
    assert {h.split(":")[0] for h in hosts} == {"pg-primary", "pg-standby"} <= set(services)
    master = env["SCHEDULER_REDIS_SENTINEL_MASTER"]
    target = parse_sentinel_url(env["REDIS_URL"], master_name=master)
    assert {host for host, _ in target.sentinels} <= set(services)
    sentinel_script = "\n".join(services["sentinel-1"]["command"])
    assert f"sentinel monitor {master} redis-master 6379 2" in sentinel_script
    assert "--replicaof redis-master 6379" in " ".join(services["redis-replica"]["command"])
    # Synchronous streaming: the primary waits for the standby, named as its base backup says.
    primary = " ".join(services["pg-primary"]["command"])
    assert "synchronous_standby_names=FIRST 1 (standby)" in primary
    standby_script = (DOCKER / "ha" / "pg-standby-entrypoint.sh").read_text()
    assert "application_name=standby" in standby_script
    assert "-S standby" in standby_script
    assert (
        "pg_create_physical_replication_slot('standby')"
        in (DOCKER / "ha" / "pg-primary-init.sh").read_text()
    )


def test_three_beat_nodes_with_stable_distinct_ids_and_a_valid_short_lease(
    services: dict[str, Any],
) -> None:
    ids = set()
    for name in BEATS:
        beat = services[name]
        command = beat["command"]
        slot = int(command[command.index("--slot") + 1])
        ids.add(f"{beat['hostname']}-{slot}")  # default_node_id: <hostname>-<slot>
        env = _env(beat)
        ttl, renew = float(env["SCHEDULER_LEASE_TTL_S"]), float(env["SCHEDULER_LEASE_RENEW_S"])
        config = EngineConfig(
            node_id=name, partitions=64, lease_ttl_s=ttl, lease_renew_s=renew, lookahead_s=30,
            claim_batch=1000, run_lease_s=30, publish_sweep_after_s=30,
            redis_url=env["REDIS_URL"], broker_url=env["REDIS_URL"],
        )  # fmt: skip
        config.validate()
        # Survivors try to take expired partitions at every renewal: at most a third of the TTL.
        assert renew <= ttl / 3
    assert len(ids) == len(BEATS)
