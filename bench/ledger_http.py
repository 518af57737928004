"""What the benchmarks' local HTTP targets share (bench/soak/target.py,
bench/compare/http_target.py): a handler that answers a JSON body and logs nothing, and the
serving loop of a target process, which prints its port and stops on SIGTERM or SIGINT."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


class JsonAnswers(BaseHTTPRequestHandler):
    def answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.wfile.write(body)
        except OSError:
            return

    def log_message(self, format: str, *args: Any) -> None:
        return


def serve(server: HTTPServer, *, close: Callable[[], None]) -> int:
    """Serve until SIGTERM or SIGINT, then ``close`` (the ledger) after the last request."""

    def stop(signum: int, frame: object) -> None:
        # shutdown() waits for serve_forever, which runs on this very thread: from another one.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        close()
    return 0
