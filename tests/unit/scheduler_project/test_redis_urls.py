"""Redis URLs: the Sentinel form kombu parses, read the same way for redis-py; bad ones refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from kombu import Connection
from redis.sentinel import SentinelConnectionPool

from scheduler_project.env import ConfigError
from scheduler_project.redis_urls import (
    SentinelTarget,
    broker_transport_options,
    check_redis_url,
    parse_sentinel_url,
    redis_from_url,
)

ROOT = Path(__file__).resolve().parents[3]
URL = "sentinel://:s%40cret@127.0.0.1:26380/3;sentinel://127.0.0.2;sentinel://[::1]:26382"


def test_sentinel_url_names_every_sentinel_and_the_masters_credentials() -> None:
    assert parse_sentinel_url(URL, master_name="mymaster") == SentinelTarget(
        sentinels=(("127.0.0.1", 26380), ("127.0.0.2", 26379), ("::1", 26382)),
        master_name="mymaster",
        db=3,
        username=None,
        password="s@cret",
        sentinel_password=None,
    )


def test_kombu_reads_the_same_sentinels_from_the_same_url() -> None:
    conn = Connection(URL, transport_options=broker_transport_options("mymaster"))
    assert conn.transport_cls == "sentinel"
    assert [Connection(alt).hostname for alt in conn.alt] == ["127.0.0.1", "127.0.0.2", "::1"]
    assert conn.transport_options == {"master_name": "mymaster"}


def test_a_sentinel_client_follows_the_named_master() -> None:
    # Built without connecting: the pool asks the sentinels for the master on first use.
    client = redis_from_url(URL, master_name="mymaster", sentinel_password="", socket_timeout=2)
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool)
    assert pool.service_name == "mymaster"
    assert pool.is_master
    assert pool.connection_kwargs["db"] == 3
    assert pool.connection_kwargs["password"] == "s@cret"
    assert pool.connection_kwargs["socket_timeout"] == 2
    sentinels = [s.connection_pool.connection_kwargs for s in pool.sentinel_manager.sentinels]
    assert [(k["host"], k["port"]) for k in sentinels] == [
        ("127.0.0.1", 26380), ("127.0.0.2", 26379), ("::1", 26382),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("url", "master", "message"),
    [
        ("sentinel://127.0.0.1:26379", "", "SCHEDULER_REDIS_SENTINEL_MASTER"),
        ("sentinel://127.0.0.1:26379;redis://127.0.0.1", "m", "must be sentinel://"),
        ("sentinel://127.0.0.1:notaport", "m", "invalid port"),
        ("sentinel://:26379", "m", "names no sentinel host"),
        ("sentinel://127.0.0.1:26379/zero", "m", "database must be a number"),
        ("http://127.0.0.1:6379", "", "got scheme 'http'"),
    ],
)
def test_unusable_urls_are_refused_with_the_reason(url: str, master: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_redis_url(url, name="REDIS_URL", master_name=master)


@pytest.mark.parametrize("url", ["redis://h:6379/0", "rediss://h", "unix:///tmp/r.sock"])
def test_plain_urls_pass_unchanged(url: str) -> None:
    assert check_redis_url(url, name="REDIS_URL", master_name="") == url


def test_settings_refuse_a_sentinel_url_without_a_master_name_at_start_up() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDULER_REDIS_SENTINEL")}
    env.update(
        REDIS_URL="sentinel://127.0.0.1:26379", DJANGO_SETTINGS_MODULE="scheduler_project.settings"
    )
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    assert "REDIS_URL is a Sentinel URL: set SCHEDULER_REDIS_SENTINEL_MASTER" in done.stderr


def test_settings_give_kombu_the_master_name_for_a_sentinel_broker() -> None:
    env = dict(
        os.environ,
        CELERY_BROKER_URL="sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380",
        SCHEDULER_REDIS_SENTINEL_MASTER="mymaster",
        DJANGO_SETTINGS_MODULE="scheduler_project.settings",
    )
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CELERY_BROKER_TRANSPORT_OPTIONS['master_name'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "mymaster"
