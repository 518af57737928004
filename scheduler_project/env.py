"""Reading configuration from the environment: typed getters and URL parsing."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit


class ConfigError(ValueError):
    """An environment variable holds a value the scheduler cannot use."""


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise ConfigError(f"{name}={raw!r} is not a boolean (use true/false)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}={value} must be at least {minimum}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value not in choices:
        raise ConfigError(f"{name}={raw!r} must be one of {', '.join(choices)}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def database_from_url(url: str) -> dict[str, Any]:
    """Django DATABASES entry from ``postgresql://user:pass@host:port/name?host=/socket/dir``.

    The ``host`` query parameter (libpq's form for Unix sockets) wins over the netloc host,
    so the embedded server's socket URL and a TCP URL parse the same way.
    """
    parts = urlsplit(url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise ConfigError(f"DATABASE_URL must be a postgresql:// URL, got scheme {parts.scheme!r}")
    query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
    name = unquote(parts.path.lstrip("/")) or "postgres"
    host = query.pop("host", None) or unquote(parts.hostname or "")
    options: dict[str, Any] = {}
    if "sslmode" in query:
        options["sslmode"] = query.pop("sslmode")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": host,
        "PORT": str(parts.port or ""),
        "OPTIONS": options,
    }


def celery_broker_from_redis_url(url: str) -> str:
    """Celery/kombu spell a Unix-socket Redis as ``redis+socket://``; redis-py as ``unix://``."""
    if url.startswith("unix://"):
        return "redis+socket://" + url[len("unix://") :]
    return url
