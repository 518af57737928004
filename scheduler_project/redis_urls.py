"""Redis clients from a URL: one plain server, or a master found through Redis Sentinel.

Every Redis client of the project (leases, the change feed, notifications, the engine's raw
broker client, the status pages, the commands) is built here, so a Sentinel URL works wherever
a plain one does. The Sentinel form is the one kombu's ``sentinel://`` transport parses, so the
same ``CELERY_BROKER_URL`` serves Celery and the engine:

    sentinel://[:password@]host1:26379[/db];sentinel://host2:26379;sentinel://host3:26379

with the master's name in ``SCHEDULER_REDIS_SENTINEL_MASTER``. The password and database come
from the first URL (kombu reads them there too) and are the master's; the sentinels' own
password, if they have one, is ``SCHEDULER_REDIS_SENTINEL_PASSWORD``.

A client from a Sentinel URL asks the sentinels for the master's address on every new
connection, and redis-py's SentinelManagedConnection drops a connection that answers READONLY
(a demoted master), so after a failover each client reaches the promoted replica on its next
reconnect (docs/operations.md, "Redis failover (Sentinel)").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from redis.sentinel import Sentinel

from scheduler_project.env import ConfigError

SENTINEL_SCHEME = "sentinel"
DEFAULT_SENTINEL_PORT = 26379
_PLAIN_SCHEMES = ("redis", "rediss", "unix")
# A dead sentinel must not stall a reconnect: the next one in the list is asked instead.
_SENTINEL_SOCKET_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class SentinelTarget:
    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int
    username: str | None
    password: str | None
    sentinel_password: str | None


def is_sentinel_url(url: str) -> bool:
    return url.strip().lower().startswith(SENTINEL_SCHEME + "://")


def parse_sentinel_url(
    url: str, *, master_name: str, sentinel_password: str = "", name: str = "REDIS_URL"
) -> SentinelTarget:
    """``sentinel://…;sentinel://…`` -> its sentinels, the master's name, db and credentials."""
    sentinels: list[tuple[str, int]] = []
    first: Any = None
    for raw in (part.strip() for part in url.split(";")):
        if not raw:
            continue
        parts = urlsplit(raw)
        if parts.scheme.lower() != SENTINEL_SCHEME:
            raise ConfigError(f"{name}: every ';'-separated entry must be sentinel://, got {raw!r}")
        try:
            port = parts.port or DEFAULT_SENTINEL_PORT
        except ValueError:
            raise ConfigError(f"{name}: {raw!r} has an invalid port") from None
        if not parts.hostname:
            raise ConfigError(f"{name}: {raw!r} names no sentinel host")
        sentinels.append((parts.hostname, port))
        first = first or parts
    if first is None:
        raise ConfigError(f"{name} names no sentinel")
    if not master_name:
        raise ConfigError(
            f"{name} is a Sentinel URL: set SCHEDULER_REDIS_SENTINEL_MASTER to the name of the "
            "master the sentinels monitor"
        )
    path = first.path.strip("/")
    if path and not path.isdigit():
        raise ConfigError(f"{name}: the database must be a number, got {path!r}")
    return SentinelTarget(
        sentinels=tuple(sentinels),
        master_name=master_name,
        db=int(path or 0),
        username=unquote(first.username) if first.username else None,
        password=unquote(first.password) if first.password else None,
        sentinel_password=sentinel_password or None,
    )


def check_redis_url(url: str, *, name: str, master_name: str, sentinel_password: str = "") -> str:
    """Refuse at start-up a URL no client could use; returns it unchanged."""
    if is_sentinel_url(url):
        parse_sentinel_url(
            url, master_name=master_name, sentinel_password=sentinel_password, name=name
        )
        return url
    scheme = urlsplit(url).scheme.lower()
    if scheme not in (*_PLAIN_SCHEMES, "redis+socket"):
        raise ConfigError(
            f"{name} must be redis://, rediss://, unix:// or sentinel:// (Sentinel: "
            f"sentinel://host1:26379;sentinel://host2:26379), got scheme {scheme!r}"
        )
    return url


def broker_transport_options(master_name: str, sentinel_password: str = "") -> dict[str, Any]:
    """What kombu's sentinel transport needs besides the URL (Celery broker_transport_options)."""
    options: dict[str, Any] = {"master_name": master_name}
    if sentinel_password:
        options["sentinel_kwargs"] = {"password": sentinel_password}
    return options


def redis_from_url(
    url: str,
    *,
    master_name: str | None = None,
    sentinel_password: str | None = None,
    **kwargs: Any,
) -> redis.Redis[bytes]:
    """A client for a plain URL (``redis.Redis.from_url``) or for a Sentinel URL's master.

    ``kwargs`` are redis-py connection options (socket_timeout, health_check_interval, …).
    The master's name and the sentinels' password default to the Django settings.
    """
    if not is_sentinel_url(url):
        client: redis.Redis[bytes] = redis.Redis.from_url(url, **kwargs)
        return client
    if master_name is None or sentinel_password is None:
        from django.conf import settings

        master_name = settings.REDIS_SENTINEL_MASTER if master_name is None else master_name
        if sentinel_password is None:
            sentinel_password = settings.REDIS_SENTINEL_PASSWORD
    target = parse_sentinel_url(
        url, master_name=master_name or "", sentinel_password=sentinel_password or ""
    )
    sentinel_kwargs: dict[str, Any] = {"socket_timeout": _SENTINEL_SOCKET_TIMEOUT_S}
    if target.sentinel_password:
        sentinel_kwargs["password"] = target.sentinel_password
    sentinel = Sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
    master: redis.Redis[bytes] = sentinel.master_for(
        target.master_name,
        db=target.db,
        username=target.username,
        password=target.password,
        **kwargs,
    )
    return master
