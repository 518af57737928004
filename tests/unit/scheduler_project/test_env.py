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
