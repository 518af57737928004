"""Settings parsing: database URLs in TCP and Unix-socket form, typed env getters."""

from __future__ import annotations

import pytest

from scheduler_project.env import (
    ConfigError,
    celery_broker_from_redis_url,
    database_from_url,
    env_bool,
    env_int,
)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql://app:s%40cret@db.internal:6543/sched",
            {
                "NAME": "sched",
                "USER": "app",
                "PASSWORD": "s@cret",
                "HOST": "db.internal",
                "PORT": "6543",
            },
        ),
        (
            "postgresql://postgres:@/scheduler?host=/tmp/pg",
            {
                "NAME": "scheduler",
                "USER": "postgres",
                "PASSWORD": "",
                "HOST": "/tmp/pg",
                "PORT": "",
            },
        ),
        (
            "postgres://u@localhost/x?sslmode=require",
            {"NAME": "x", "USER": "u", "HOST": "localhost", "OPTIONS": {"sslmode": "require"}},
        ),
    ],
)
def test_database_from_url_parses_tcp_and_socket_forms(
    url: str, expected: dict[str, object]
) -> None:
    parsed = database_from_url(url)
    assert parsed["ENGINE"] == "django.db.backends.postgresql"
    for key, value in expected.items():
        assert parsed[key] == value


def test_database_from_url_rejects_other_schemes() -> None:
    with pytest.raises(ConfigError, match="postgresql://"):
        database_from_url("sqlite:///db.sqlite3")


def test_unix_redis_url_becomes_kombu_socket_url() -> None:
    assert celery_broker_from_redis_url("unix:///tmp/r.sock") == "redis+socket:///tmp/r.sock"
    assert celery_broker_from_redis_url("redis://h:6379/0") == "redis://h:6379/0"


def test_env_getters_reject_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("X_BOOL", "maybe")
    monkeypatch.setenv("X_INT", "ten")
    with pytest.raises(ConfigError, match="X_BOOL"):
        env_bool("X_BOOL", False)
    with pytest.raises(ConfigError, match="X_INT"):
        env_int("X_INT", 1)
    monkeypatch.setenv("X_INT", "0")
    with pytest.raises(ConfigError, match="at least 1"):
        env_int("X_INT", 5, minimum=1)


@pytest.mark.parametrize(
    ("url", "host", "port", "options"),
    [
        (
            "postgresql://u:p@h1:5432,h2:5433/db?target_session_attrs=read-write",
            "h1,h2",
            "5432,5433",
            {"target_session_attrs": "read-write", "connect_timeout": "5"},
        ),
        (
            "postgresql://u:@/db?host=/run/a,/run/b&target_session_attrs=read-write",
            "/run/a,/run/b",
            "",
            {"target_session_attrs": "read-write", "connect_timeout": "5"},
        ),
        (
            "postgresql://u@h1,h2/db?target_session_attrs=read-write&connect_timeout=2",
            "h1,h2",
            "",
            {"target_session_attrs": "read-write", "connect_timeout": "2"},
        ),
    ],
)
def test_database_from_url_keeps_libpq_host_lists(
    url: str, host: str, port: str, options: dict[str, str]
) -> None:
    parsed = database_from_url(url)
    assert (parsed["NAME"], parsed["USER"], parsed["HOST"], parsed["PORT"]) == (
        "db", "u", host, port,
    )  # fmt: skip
    assert parsed["OPTIONS"] == options


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://u@h1/db?no_such_parameter=1", "no_such_parameter"),
        ("postgresql://u@h1:http/db", "invalid port 'http'"),
        ("postgresql://u@h1:1,h2:2/db?port=1,2,3", "3 ports for 2 hosts"),
        ("postgresql://u@/db?host=/a,,/b", "empty host"),
    ],
)
def test_database_from_url_refuses_unusable_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        database_from_url(url)
