"""Ending this thread's PostgreSQL session from outside, as a server restart or a failover does."""

from __future__ import annotations

import psycopg
from django.db import connection


def terminate_my_backend() -> None:
    """What a primary's death does to a connection: the server end goes away under it."""
    pid = connection.connection.info.backend_pid
    params = connection.get_connection_params()
    conninfo = psycopg.conninfo.make_conninfo(
        **{k: v for k, v in params.items() if k in {"dbname", "user", "password", "host", "port"}}
    )
    with psycopg.connect(conninfo, autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s)", [pid])
