"""HTTP POST to a target at the address the SSRF policy validated: no redirects, bounded read."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jobs.http_policy import resolve_allowed


class HttpAborted(Exception):
    """The call was aborted from another thread (cancellation)."""


class HttpTimeout(Exception):
    """Connecting, sending or reading took longer than the job's timeout."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: bytes
    truncated: bool
    # Raw header values, None when absent: what they mean is decided by the caller
    # (jobs/retry_after.py), and the Date is the reference for a Retry-After HTTP-date.
    retry_after: str | None = None
    date: str | None = None


class _PinnedHTTPConnection(http.client.HTTPConnection):
    """Connects to a validated IP while the Host header still names the URL's host."""

    def __init__(self, host: str, port: int, *, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.pinned_address = address

    def connect(self) -> None:
        # Connect to the address the SSRF policy checked (jobs/http_policy.py), so a DNS answer
        # that changes between check and use (rebinding) cannot redirect us.
        self.sock = socket.create_connection((self.pinned_address, self.port), self.timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _PinnedHTTPSConnection(_PinnedHTTPConnection):
    default_port = 443

    def __init__(self, host: str, port: int, *, address: str, timeout: float) -> None:
        super().__init__(host, port, address=address, timeout=timeout)
        self.tls_context = ssl.create_default_context()

    def connect(self) -> None:
        super().connect()
        # SNI and certificate checks use the URL's host name, not the pinned IP.
        self.sock = self.tls_context.wrap_socket(self.sock, server_hostname=self.host)


class HttpCall:
    """One POST that another thread may abort by shutting its socket down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: _PinnedHTTPConnection | None = None
        self._aborted = False

    def abort(self) -> None:
        with self._lock:
            self._aborted = True
            sock = self._conn.sock if self._conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                # Already closed: the call is over either way.
                return

    def _connect(self, url: str, timeout_s: float) -> _PinnedHTTPConnection:
        parts = urlsplit(url)
        host = parts.hostname or ""
        conn_class = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
        last_error: OSError | None = None
        for address, port in resolve_allowed(url):
            conn = conn_class(host, port, address=str(address), timeout=timeout_s)
            with self._lock:
                if self._aborted:
                    raise HttpAborted("aborted before connecting")
                self._conn = conn
            try:
                conn.connect()
                return conn
            except OSError as exc:
                last_error = exc
        assert last_error is not None
        raise last_error

    def post_json(
        self,
        url: str,
        payload: Any,
        *,
        headers: dict[str, str],
        timeout_s: float,
        max_bytes: int,
    ) -> HttpResponse:
        """POST ``payload`` as JSON. Raises InvalidInput (policy), HttpTimeout, HttpAborted,
        OSError or http.client.HTTPException (connection trouble)."""
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        body = json.dumps(payload, allow_nan=False).encode()
        try:
            conn = self._connect(url, timeout_s)
            try:
                conn.request(
                    "POST",
                    path,
                    body=body,
                    headers={"Content-Type": "application/json", **headers},
                )
                response = conn.getresponse()
                # Read one byte past the limit to know whether the body was cut.
                data = response.read(max_bytes + 1)
                return HttpResponse(
                    response.status,
                    data[:max_bytes],
                    len(data) > max_bytes,
                    retry_after=response.getheader("Retry-After"),
                    date=response.getheader("Date"),
                )
            finally:
                conn.close()
        except TimeoutError as exc:
            raise HttpTimeout(f"timed out after {timeout_s:.1f}s") from exc
        except (OSError, http.client.HTTPException) as exc:
            if self._aborted:
                raise HttpAborted("aborted") from exc
            raise
