"""Reading configuration from the environment: typed getters and URL parsing."""

from __future__ import annotations

import os
from typing import Any


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


# libpq's default is to wait as long as the OS does (minutes for a host that vanished from the
# network); with a host list that is the time before the next host is even tried.
DEFAULT_CONNECT_TIMEOUT_S = "5"


def database_from_url(url: str) -> dict[str, Any]:
    """Django DATABASES entry from a libpq connection URI.

    libpq parses it (psycopg's ``conninfo_to_dict``), so every form it accepts works: one host,
    a host list for failover (``postgresql://u:p@h1:5432,h2:5432/db?target_session_attrs=
    read-write``), Unix sockets in the query (``?host=/run/a,/run/b``, which wins over the
    netloc) and any other libpq parameter, which is passed through in OPTIONS. Choosing among
    the hosts is libpq's work at each connect: with ``target_session_attrs=read-write`` it
    skips a standby and a server that refuses connections and takes the first writable one.
    """
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in {"postgres", "postgresql"}:
        raise ConfigError(f"DATABASE_URL must be a postgresql:// URL, got scheme {scheme!r}")
    try:
        params = {key: str(value) for key, value in conninfo_to_dict(url).items()}
    except ProgrammingError as exc:
        raise ConfigError(f"DATABASE_URL is not a usable PostgreSQL URL: {exc}") from None
    _check_hosts(params.get("host", ""), params.get("port", ""))
    options: dict[str, Any] = {
        key: value
        for key, value in params.items()
        if key not in {"dbname", "user", "password", "host", "port"}
    }
    if len(params.get("host", "").split(",")) > 1:
        options.setdefault("connect_timeout", DEFAULT_CONNECT_TIMEOUT_S)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.get("dbname") or "postgres",
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        # libpq spells "default port for every host" as ",": Django's empty PORT says the same.
        "PORT": params.get("port", "") if params.get("port", "").strip(",") else "",
        "OPTIONS": options,
    }


def _check_hosts(hosts: str, ports: str) -> None:
    """Refuse at start-up what libpq would only refuse at the first connect."""
    host_list = hosts.split(",")
    port_list = ports.split(",") if ports else []
    if len(host_list) > 1 and any(not host.strip() for host in host_list):
        raise ConfigError(f"DATABASE_URL lists an empty host in {hosts!r}")
    if len(port_list) not in {0, 1, len(host_list)}:
        raise ConfigError(
            f"DATABASE_URL gives {len(port_list)} ports for {len(host_list)} hosts "
            "(give one port for all, or one per host)"
        )
    for port in port_list:
        if port and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise ConfigError(f"DATABASE_URL has an invalid port {port!r}")


def celery_broker_from_redis_url(url: str) -> str:
    """Celery/kombu spell a Unix-socket Redis as ``redis+socket://``; redis-py as ``unix://``."""
    if url.startswith("unix://"):
        return "redis+socket://" + url[len("unix://") :]
    return url
