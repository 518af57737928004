"""A local webhook receiver: records every request's raw body and headers, answers with the
statuses a test scripts per path (then 200), loopback only."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class WebhookReceiver:
    server: ThreadingHTTPServer
    received: list[Received] = field(default_factory=list)
    # path -> statuses to answer, first first; 200 once they are used up.
    script: dict[str, list[int]] = field(default_factory=dict)
    # Requests to /hang wait for this (at most 30 s), to stand for a receiver that hangs.
    release: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def to(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]


def _handler(receiver: WebhookReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            receiver.received.append(Received(self.path, dict(self.headers.items()), body))
            if self.path == "/hang":
                receiver.entered.set()
                receiver.release.wait(30)
            statuses = receiver.script.get(self.path) or []
            code = statuses.pop(0) if statuses else 200
            self.send_response(code)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture(name="webhook_receiver")
def webhook_receiver_fixture(monkeypatch: pytest.MonkeyPatch) -> Iterator[WebhookReceiver]:
    """A running receiver, allowlisted for plain http in this process (the SSRF policy refuses
    loopback otherwise)."""
    from django.conf import settings

    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    receiver = WebhookReceiver(server)
    server.RequestHandlerClass = _handler(receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setitem(settings.SCHEDULER, "HTTP_ALLOWLIST", [f"127.0.0.1:{receiver.port}"])
    yield receiver
    receiver.release.set()
    server.shutdown()
    server.server_close()
