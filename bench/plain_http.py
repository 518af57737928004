"""The HTTP call a plain Celery task makes in the benchmarks: what a user of another scheduler
runs to call an endpoint, and the same call as ours (jobs/http_client.py): a new connection,
TCP_NODELAY, a JSON POST, the answer read; an error status raises, as `raise_for_status()`
would. Shared by the side-by-side benchmark's peer task (bench/compare/peer_app.py) and the
executor benchmark's bare task (bench/bench_tasks.py)."""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit

TIMEOUT_S = 30.0


def post_firing(url: str, firing: str) -> int:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=TIMEOUT_S)
    try:
        conn.connect()
        assert conn.sock is not None
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        body = json.dumps({"firing": firing}).encode()
        conn.request("POST", parts.path or "/", body=body,
                     headers={"Content-Type": "application/json"})  # fmt: skip
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    if response.status >= 300:
        raise RuntimeError(f"HTTP {response.status} from {url}")
    return response.status
